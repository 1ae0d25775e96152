"""Recording runs: `traceagent profile` runs the user's script under a profiler and keeps each run;
`traceagent runs` lists and compares them (docs/ARCHITECTURE.md, "traceagent/profile")."""
