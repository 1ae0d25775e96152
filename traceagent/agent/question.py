"""What a question asks, for the offline analyst: its intent and the things it names (a rank, a
GPU, steps, a hot kernel of this trace, a threshold), read with patterns, no model.

Intents are tried in order; the first whose pattern matches wins, so the specific come before the
general ("is it compute-bound?" before "kernels", "step 5 vs 6" before "compare").
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field

from ..detect.core.asked import ENGLISH
from ..detect.detectors.annotations import host_ranges_named
from ..detect.detectors.modules import modules_named
from ..detect.detectors.time_by_class import CLASS_WORDS, classes_named
from ..detect.registry import DETECTORS
from .tools import AnalysisContext

#: what a question calls mixed precision, and another GPU (by its name in the peak table's words)
PRECISION = r"mixed[- ]precision|autocast|amp|bf16|bfloat16|fp16|float16|half[- ]precision"
FP8 = r"fp8|float8|e4m3|e5m2|transformer engine"
OTHER_GPU = r"(?:a |an )?(?:faster|newer|bigger|better) gpu|h100|h200|h800|a100|a10g?|l40s?|l4|b200|b100|gb200|mi300x?|" \
            r"mi325x?|mi250x?|v100|t4|rtx ?\d{4}"
_CLASSES_SAID = "|".join(words for name, words in CLASS_WORDS if name != "memory_bound")
#: what a question puts between two things it compares ("step 5 vs 6", "rank 0 compared to rank 1")
_VERSUS = r"vs\.?|versus|against|compared (?:to|with)"
#: communication named, by a collective's name as people write it ("all-to-all", "reduce scatter", "alltoall")
COLLECTIVES_SAID = (r"collectives?|nccl|rccl|communication|all[- ]?reduces?|all[- ]?gathers?|reduce[- ]?scatters?|"
                    r"all[- ]?to[- ]?alls?|broadcasts?|send[- ]?recvs?")
#: a change of batch size, or a judgement of it, asked about ("should I increase the batch size?", "is my batch
#: size too small?"), not the batch size itself
_BATCH_CHANGED = (r"\bif\b|\bwould\b|\bshould\b|\btoo (?:small|large|big)\b|\benough\b|\boptimal\b|"
                  r"\b(?:bigger|larger|smaller|double\w*|halv\w*|increas\w*|decreas\w*|rais\w*)\b")
#: a line of the user's code asked about ("which python line causes the most idle?", "where in my code?")
LINE_ASKED = (r"\b(?:which|what) (?:python |source )?lines?\b|\bpython lines?\b|"
              r"\b(?:line|part|where) (?:of|in) (?:my |the )?code\b")
#: idle asked about in words ("why is the GPU idle?", "how much idle time is there per step?")
IDLE_WORDS = re.compile(r"\b(?:idle|gaps?|bubbles?|stall\w*)\b", re.I)
#: the links between GPUs and nodes named ("NVLink", "the interconnect", "InfiniBand")
LINKS_SAID = r"interconnect|network|nvlink|xgmi|infinity fabric|infiniband|roce"
#: the busy share asked in words: "what percentage of time is the GPU actually computing?"
BUSY_IN_WORDS = (r"\b(?:gpus?|devices?)\b.{0,30}\b(?:actually |really )?"
                 r"(?:comput(?:ing|es)|working|in use|doing (?:useful )?work)\b|"
                 r"\b(?:percent(?:age)?|fraction|share|proportion) of (?:the )?time\b.{0,40}\b(?:gpus?|devices?)\b")
#: how busy the GPU is, asked: "busy", "utilization", or in words
BUSY_SAID = re.compile(r"\bbusy\b|\butili[sz]\w*|" + BUSY_IN_WORDS, re.I)
_PHASE_WORDS = re.compile(r"\b(?:prefill|pre-fill|decode|decoding)\b", re.I)
#: what a run's or step's time goes to, asked in words: "what's eating my step time?", "where does the
#: iteration time go?", "break down the step time", "what is the step made of?"
_TIME_GOES_TO = (r"(?:\b(?:eat\w*|consum\w*|tak\w* up|us\w* up|dominat\w*)\b.{0,25}\btime\b|"
                 r"\bwhat (?:takes|is taking|uses|is using|spends) (?:up )?(?:the )?most (?:of the )?time\b|"
                 r"\bbreak\w* down\b.{0,25}\btime\b|\bwhere (?:is|does) (?:the |my )?(?:step |iteration |run )?time "
                 r"(?:going|go)\b|\bwhat (?:is|are) (?:the |a |my )?(?:steps?|iterations?) made of\b)")
#: the kernels launched most often asked ("which kernels are launched the most?", "the most frequent kernels")
MOST_CALLED_KERNELS = (r"\bkernels?\b.{0,20}\b(?:launched|called|run|invoked|executed)\b.{0,10}\b(?:the )?most\b(?! time)|"
                       r"\bmost (?:frequent(?:ly)?|often|commonly|called|launched)\b.{0,20}\bkernels?\b")
#: the job's size asked ("how many GPUs are used?", "the number of ranks")
GPUS_COUNTED = r"\bhow many (?:gpus|ranks|devices|nodes|workers|processes)\b|\bnumber of (?:gpus|ranks|devices)\b"
#: how long the trace or the run lasted ("what is the total training time?", "how long is the trace?"): a
#: profile records a window of the run, which the summary says first
RUN_LENGTH = (r"\bhow long (?:was|is|did|does) (?:the |this |my )?(?:profile|profiling|trace|recording|capture|run|"
              r"training|job|program|script)\b(?! (?:step|iteration|kernel|op)s?\b)|"
              r"\b(?:total|overall|whole|entire|end-to-end) (?:training |run |job |wall(?:[- ]clock)? |execution |elapsed )?"
              r"(?:time|duration|runtime|length)\b(?! (?:of|in|on|spent) (?:the |each |a )?(?:step|kernel|op|gpu|comm|copies|"
              r"data|idle)\w*)|\bwall[- ]?(?:clock )?time\b|\b(?:duration|length) of (?:the |this |my )?(?:trace|profile|"
              r"run|recording|capture|training)\b|\btime (?:does|did) (?:the |this )?(?:trace|profile) (?:cover|span|record)")
#: what a question may ask that no profiler trace records: (what, how it is asked, where to read it instead)
NOT_RECORDED: list[tuple[str, str, str]] = [
    ("the model's parameter count",
     r"\bhow many (?:model |trainable )?(?:parameters|params|weights)\b|\b(?:parameter|param) count\b|"
     r"\bnumber of (?:model |trainable )?(?:parameters|params)\b",
     "`sum(p.numel() for p in model.parameters())` in the script"),
    ("the learning rate", r"\blearning[- ]rate\b|\blr schedule\b",
     "`optimizer.param_groups[0]['lr']`, or the run's logs (TensorBoard, W&B)"),
    ("loss or accuracy values",
     r"\b(?:training|validation|val|test|eval) (?:loss|accuracy)\b|\bwhat(?:'s| is) the (?:loss|accuracy)\b|"
     r"\bloss (?:value|curve)s?\b|\bis (?:the|my) (?:loss|model) (?:going down|decreasing|converg\w*)|"
     r"\b(?:loss|model|training) (?:\w+ )?converg\w*",
     "the run's logs (TensorBoard, W&B, the script's prints)"),
    ("how many epochs the run trains", r"\b(?:how many|number of) epochs\b|\bepochs? (?:count|number)\b",
     "the training script's arguments or its logs; the trace records only the steps it profiled"),
    # a fused MoE kernel runs every expert at once: which expert got which tokens is the router's, in the model
    ("how tokens are routed among the experts (their load balance)",
     r"\bexperts?\b.{0,40}\b(?:imbalanc\w*|unbalanc\w*|balanc\w*|routing|routed|skew\w*|load(?:s|ed)?\b(?! (?:time|from)))|"
     r"\b(?:imbalanc\w*|unbalanc\w*|load[- ]balanc\w*|routing|skew\w*)\b.{0,40}\bexperts?\b|\bhot experts?\b|"
     r"\b(?:which|what) experts?\b",
     "the router's choices in the model: count each step's tokens per expert (`torch.bincount(topk_ids.flatten(), "
     "minlength=num_experts)`), or the serving engine's expert-load statistics; the trace times the MoE kernels, "
     "which run the experts together"),
    # Nsight Systems records them where asked to; traceagent reads no fault table, a Kineto trace has none
    ("Unified Memory page faults or migrations",
     r"\bpage[- ]?faults?\b|\b(?:unified|managed) memory\b|\bcudaMallocManaged\b|\bum (?:migrations?|faults?)\b",
     "`nsys profile --cuda-um-cpu-page-faults=true --cuda-um-gpu-page-faults=true`, which records them; prefetching "
     "managed memory before the kernels use it (`cudaMemPrefetchAsync`) avoids them"),
]
# (intent, pattern): the order is the priority
INTENTS: list[tuple[str, re.Pattern]] = [(name, re.compile(pattern, re.I)) for name, pattern in [
    # what a profiler does not record (the model's size, the training's values): said so, with where to read it
    ("not_recorded", "|".join(said for _, said, _ in NOT_RECORDED)),
    # two ranks named: "why is rank 0 slower than rank 1?", "rank 2 vs 5"
    ("rank_vs_rank", rf"\brank\s*#?\d+\b.{{0,60}}?\b(?:{_VERSUS}|than|and|to|with|or)\s*"
                     r"(?:rank\s*)?#?\d+\b"),
    # two GPUs named: "compare GPU 0 and GPU 1", "why is GPU 1 idle more than GPU 0?"
    ("device_vs_device", rf"\b(?:gpu|device|cuda:)\s*#?\d+\b.{{0,60}}?\b(?:{_VERSUS}|than|and|to|with|or|as)\s*"
                         r"(?:(?:gpu|device|cuda:)\s*)?#?\d+\b"),
    ("step_vs_step", rf"\bsteps?\s*#?\d+\s*(?:{_VERSUS}|and|to|-|–)\s*(?:step\s*#?)?\d+|"
                     rf"\bsteps?\s*#?\d+\b.{{0,40}}?\b(?:than|{_VERSUS})\s*step\s*#?\d+"),
    # communication weighed against computation ("the comm to compute ratio", "how does communication time
    # compare with compute time?"): the communication answer's ratio, not two runs compared
    ("communication", rf"\b(?:communication|collectives?|nccl|rccl)\b.{{0,25}}\b(?:ratio|{_VERSUS}|to|over|compar\w*|"
                      r"against|relative)\b.{0,25}\b(?:computation|compute|computing)\b|"
                      rf"\b(?:computation|compute)\b.{{0,25}}\b(?:ratio|{_VERSUS}|to|over|compar\w*|against|relative)\b"
                      r".{0,25}\b(?:communication|collectives?|nccl|rccl)\b|"
                      # the ranks ranked by their communication ("which rank communicates the most?"), not the straggler
                      r"\bwhich (?:ranks?|gpus?|workers?) (?:communicates?|(?:spends?|has|have|does|do) (?:the )?(?:most|least|"
                      r"more|less)\b.{0,25}\b(?:communication|collectives?|nccl|rccl|all-?reduce))"),
    ("compare", r"\b(?:did (?:it|that|this|the (?:[\w-]+ ){0,3}(?:fix|change))\s+(?:help|work|fix|improve)|is it (?:any )?"
                r"(?:faster|slower|better|worse)|(?:faster|slower) now|what changed|compar|before and after|"
                r"after the (?:fix|change)|improv(?:ed|es)\b|improvements? (?:from|after|since|over|between)|"
                r"\b(?:any|an|the|much|no) improvement\b(?! (?:can|could|should|would|to) (?:i|we|make)\b)|"
                r"\bdid\b.{0,40}\bimprove\b|regress|\bdiff\b|did \w+ (?:fix|help)|"
                # the speedup measured, not one to find ("how can I speed up training?" is optimize_first's)
                r"\b(?:the|a|any|what|got|get|measured|real|actual) speed-?up\b"
                r"|did (?:my|our|the|this|that) (?:[\w-]+ ){0,3}(?:change|fix|patch|commit|edit|update)s?\b[^?.]{0,40}?"
                r"\b(?:faster|slower|help|work|improve|fix|speed))"),
    # "which rank launches the most kernels?" is about kernels; "which rank waits the most?" the straggler's
    ("straggler", r"\b(?:straggler|which rank(?! (?:is |has |sits |(?!waits)\w+s )?(?:the )?(?:busiest|idlest|busier|"
                  r"most|least|more|less|fewest|fewer)\b)|"
                  r"slowest rank|late rank|load imbalance|imbalance|balanced|barriers?|skew\w*|"
                  r"(?:ranks|workers) (?:wait|waits|waiting)|rank\s*#?\d+ (?:the )?(?:problem|culprit|bottleneck)|"
                  r"(?:same|equal|even|similar) (?:on|across|for) (?:all|every|each|the) ranks?|waits? (?:for|on) "
                  r"(?:whom|which|rank)|who (?:is )?wait|rank \d+ (?:is )?waiting|waiting (?:for|on) (?:other|another) rank|"
                  # the ranks kept in step with each other, not the host with its GPU
                  r"(?:ranks|workers|gpus) (?:are |were |stay |run )?(?:in sync|in lockstep|out of sync|synchroni[sz]ed|"
                  r"aligned))"),
    ("scaling", r"\b(?:scal(?:e|es|ing|ability)\b|(?:more|twice as many) (?:gpus|nodes|ranks)\b|parallel efficiency|"
                r"(?:strong|weak) scaling)"),
    ("most_idle", r"\b(?:split|spread|divided|shared)\b.{0,30}\b(?:across|between|over|among) (?:the |all |both )?"
                  r"(?:two |\d+ )?(?:gpus|devices)\b|"
                  r"\bwhich (?:gpu|rank|device)s? (?:has|have|had) (?:the )?(?:most|least|highest|lowest|largest) "
                  r"(?:idle|busy|utili[sz]ation)|"
                  r"\bwhich (?:gpu|rank|device)s? (?:is |are |sits? )?(?:the )?(?:most|least) (?:idle|busy|utili[sz]ed)|"
                  r"\bwhich (?:gpu|device)s? (?:is |are |runs? )?(?:the )?(?:slower|slowest|faster|fastest)\b|"
                  r"\bwhich (?:gpu|rank|device)s? (?:is |are )?(?:the )?(?:busier|idler|busiest|idlest|"
                  r"(?:more|less) (?:idle|busy|utili[sz]ed))\b|"
                  r"\b(?:utili[sz]ation|busy|idle)\b.{0,30}\b(?:each|every|per|all) (?:ranks?|gpus?|devices?)\b|"
                  r"\b(?:each|every|per|all) (?:ranks?|gpus?|devices?)\b.{0,30}\b(?:utili[sz]ation|busy|idle)\b"),
    ("mfu", r"\b(?:mfu|t?flop/?s|t?flops|model flops|tensor ?cores?|tensor core utili[sz]ation|"
            r"achieved (?:t?flop|throughput))\b|"
            # the math's rate asked in words: "the throughput of the matmul kernels"
            r"\b(?:throughput|efficien\w*)\b.{0,20}\b(?:matmuls?|gemms?|math|convolutions?|attention|kv[- ]?cache)\b|"
            r"\b(?:matmuls?|gemms?|math|convolutions?|convs?|tensor cores?|attention|kv[- ]?cache)\b.{0,20}"
            r"\b(?:throughput|efficien\w*)|"
            r"\bclose to (?:the )?peak\b|\b(?:of|vs\.?|versus|against) (?:the )?(?:hardware )?peak\b|"
            # "how far from peak am I?", "what is the theoretical peak?" (of compute; memory's peak is memory's)
            r"^(?!.*\bmemory\b).*(?:\bfar (?:from|off|below) (?:the )?peak\b|\btheoretical peak\b|"
            r"\bpeak (?:t?flop/?s|t?flops|compute|performance)\b)"),
    # whether the link is what limits the job is the bound intent's ("is the network the bottleneck?")
    ("interconnect", r"^(?!.*\b(?:bottleneck\w*|limiter|limiting|holding (?:\w+ )?back)\b)"
                     rf".*\b(?:{LINKS_SAID}|busbw|bus bandwidth|algbw|"
                     rf"(?:{COLLECTIVES_SAID})\b.{{0,40}}\b(?:bandwidth|latency)|"
                     rf"(?:bandwidth|latency)\b.{{0,40}}\b(?:{COLLECTIVES_SAID}))"),
    ("critical_path", r"\b(?:critical path|on the (?:critical )?path|what (?:sets|determines) (?:the )?(?:step|run) ?time|"
                      r"would (?:it|that) save|worth (?:optimi[sz]ing|speeding))"),
    # a bound asked of a phase ("is the decode memory-bound?") is the bound intent's: phases say no bound
    # as is a bottleneck asked of a phase, and why the GPU idles in one ("… between decode steps?": idle)
    # the phases weighed against each other ("is prefill or decode the bottleneck?") are theirs too
    ("phases", r"\b(?:prefill|decode)\b.{0,12}\b(?:or|vs\.?|versus|and)\b.{0,12}\b(?:prefill|decode)\b|"
               r"^(?!.*(?:\w[- ]bound\b|\bbound by\b|\blimited by\b|\bbottleneck))(?!.*\bwhy\b.*\b(?:idle|gaps?|"
               r"bubbles?|stall\w*)\b).*"
               r"\b(?:prefill|pre-fill|decode|decoding|inference phases?|serving steps?|vllm|sglang|ttft|tpot)\b|"
               r"\btokens? ?(?:/|per) ?s(?:ec(?:ond)?)?\b|\btime to first token|\binter-?token|\bper output token|"
               r"\bhow many (?:tokens|requests|sequences|prompts)\b|\b(?:tokens|requests?) (?:are )?(?:in|per) "
               r"(?:the |a |each )?(?:batch|step)\b|\bconcurrent requests\b|"
               r"\blatency per token|\bper[- ]token latency|\btoken latency"),
    # the job's rate: tokens where an inference server's steps say them (phases, above), else steps per second
    ("throughput", r"^(?!.*\b(?:cop(?:y|ies)|memcpy|transfers?|pcie|nvlink|interconnect|collectives?|nccl|rccl|"
                   r"all-?reduce|network|bandwidth|memory)\b)(?!.*\bwhat (?:limits|is limiting|holds back|caps)\b).*"
                   r"\bthroughput\b|"
                   r"\b(?:samples?|images?|sequences?|examples?|items?|batch(?:es)?|iterations?|steps?|it) ?(?:/|per) ?"
                   r"s(?:ec(?:ond)?)?\b|\bit/s\b"),
    ("bound", r"\b(?:\w+[- ]bound|bound by|limited by|bottleneck(?:ed)?)\b.*\?|^\s*(?:is|am|are)\b.*\b(?:bound|limited)\b"
              # the kernels against the memory's bandwidth (not copies against a link)
              r"|^(?!.*\b(?:cop(?:y|ies)|memcpy|transfers?|pcie|nvlink)\b).*\b(?:memory|dram|hbm) bandwidth\b.{0,30}"
              r"\b(?:saturat\w*|limit\w*|bound|bottleneck\w*|maxed|utili[sz]\w*|used)"
              r"|what(?:'s| is) (?:the|my) (?:main )?(?:bottleneck|limiter|limit)|\barithmetic intensity\b|\broofline\b|"
              r"\bwhat(?:'s| is)? (?:limiting|limits|holding back|slowing down|slows down)\b|"
              r"^\s*(?:is|are)\b.{0,40}\b(?:limiting|holding (?:\w+ )?back)\b|"
              # a class of work called costly: "is softmax expensive?", "are the convolutions slow?"
              rf"^\s*(?:is|are)\b.{{0,30}}\b(?:{_CLASSES_SAID}).{{0,30}}\b(?:expensive|costly|slow|heavy|a problem|"
              r"significant|hurting)"),
    # what the trace lacks: the profiling answer lists it, with how to record each
    ("profile_next", r"\b(?:is|was) (?:the|this|my) (?:trace|profile) (?:complete|whole|missing)|\bwhat(?:'s| is| does)? "
                     r"(?:the |this )?(?:trace )?(?:missing|lack)|\bwhat (?:can't|cannot|can not|doesn't|does not) "
                     r"(?:the |this )?trace|\bwhat (?:else )?should i (?:record|enable|turn on)\b|"
                     r"\b(?:profile next|what (?:should|do|can) i profile|how (?:do|should|can) i profile|which profiler|"
                     r"nsight|\bncu\b|\bnsys\b|measure next|dig deeper|more detail|what (?:else )?to measure)"),
    # before whatif: the replay cannot change the batch size ("what if I doubled the batch size?")
    # a workload too small for the GPU is what a too-small batch looks like ("is the model too small for this GPU?")
    ("batch_size", r"\bbatch[- ]?sizes?\b|\bbigger batch|\blarger batch|\bmore per batch|"
                   r"\b(?:model|workload|job|network)\b.{0,20}\btoo (?:small|little)\b|\btoo small for (?:the|this|my) gpu\b|"
                   r"\b(?:gpu|device) (?:is )?too (?:big|large|powerful)\b|\bunder-?fe[de]\w*"),
    ("whatif", r"\bwhat if\b|\bwhat (?:would|will) happen if\b|\bif (?:i|we) (?:removed?|used?|switch(?:ed)?|made|make|"
               r"turn(?:ed)?|enabled?|add(?:ed)?|pinn?(?:ed)?|drop(?:ped)?|fix(?:ed)?|sped|speed)\b|\bsimulat\w*|"
               r"\bpredict\w*|\bwhatif\b|\bwhat (?:would|will|could) (?!fixing|removing|getting)(?:\w+ ){1,4}?"
               r"(?:buy|gain|save)\b|"
               # a speed-up asked of: "would making the conv faster help?", "would optimizing attention matter?"
               r"\bwould (?:making|speeding up|optimi[sz]ing|tuning|a faster|faster)\b.{0,40}?\b(?:help|matter|buy|gain|save|"
               r"faster)\b|"
               # a change with its factor: "with 2x faster convolutions", "if attention were 1.5 times faster"
               r"\b\d+(?:\.\d+)?\s*(?:x|×|times)\s+(?:faster|quicker)\b|"
               # a change named with what it would buy: mixed precision, another GPU
               rf"\b(?:{PRECISION}|{FP8}|{OTHER_GPU})\b.{{0,40}}\b(?:help|gain|buy|save|faster|speed\w*|worth)|"
               rf"\b(?:help|gain|buy|save|faster|speed\w*)\b.{{0,40}}\b(?:{PRECISION}|{FP8}|{OTHER_GPU})\b"),
    ("compile", r"\btorch\.?compile|\bcompil(?:e|ing) (?:the|my) model|\binductor\b|\bkernel fusion\b|\bcompiled\b|"
                r"\b(?:be )?fus(?:e|ed|ing|ion)\b|\b(?:spent|spend|time) (?:in |on )?compil\w*|\bcompil\w* (?:time|overhead)\b|"
                r"\brecompil\w*"),
    ("saving", r"\bhow much (?:faster|quicker) (?:could|can|would|might|will) (?:it|this|the \w+|my \w+)\b|"
               r"\bhow much (?:\w+ ){0,8}?(?:would|could|will|can|might|does|do)\b.{0,80}\b(?:save|gain|buy|win|cut|"
               r"speed|faster)|\bhow much (?:faster|time)\b.{0,60}\b(?:fix|remov|if)|\bwhat (?:would|could) "
               r"(?:fixing|removing|getting rid of)\b.{0,60}\b(?:save|gain|buy)|\bwhat(?:'s| is) the (?:potential |expected )?"
               r"(?:saving|gain|speed-?up)"),
    ("optimize_first", r"\b(?:optimi[sz]e first|first thing|where (?:do|should|to) (?:i )?start|"
                       r"(?:biggest|best|largest|main|top) (?:single )?(?:win|gain|saving|improvement|speed-?up)|"
                       r"(?:how|where|what) (?:can|do|could|should) (?:i|we) improve|what (?:would|could|will|can) improve|"
                       r"improvements? (?:can|could|should) (?:i|we)|"
                       r"priorit|most impact|fix first|what (?:should|do|can) i (?:fix|optimi[sz]e|change|do)|"
                       r"how (?:do|can|to) (?:i )?(?:fix|speed|make it faster)|what would (?:it )?save|"
                       r"\b(?:make|get) (?:it|this|things|the (?:job|run|model|training|code)|my \w+)(?: run| go)? faster\b|"
                       r"\bspeed (?:it|this|things|my \w+) up\b|"
                       r"\bhow (?:can|do|could|should|would) (?:i|we) (?:reduce|cut|lower|shorten|decrease)\b|"
                       r"\bhow (?:can|do|could|should|would) (?:i|we) (?:speed up|"
                       r"accelerate|optimi[sz]e)\b|\bmake (?:\w+ ){0,3}?(?:faster|quicker)\b|\bimprove (?:the )?performance\b|"
                       r"\b(?:tips|advice|suggestions?|recommend\w*|ideas)\b|\bwhat (?:should|do|can) i look at\b|"
                       r"^\s*(?:fix(?:es)?|next steps?|what next|now what)\s*\??\s*$|"
                       r"\bwhat(?:'s| is| are)? (?:the |my )?next steps?\b(?! times?)|"
                       r"\bwhat would help(?: the)? most\b|\binefficien\w*)"),
    # "which kernels are launched the most?": the kernels by their count, not launch overhead
    ("kernels", MOST_CALLED_KERNELS),
    # a runtime call names its kind of work too: cudaLaunchKernel, cudaStreamSynchronize, hipMemcpyAsync
    ("launch", r"\bhow many kernels\b|\bkernels (?:per|a|each) (?:step|iteration)\b|"
               r"\b(?:number|count) of (?:kernels|launches)\b|"
               r"\b(?:outside|inside|out of) (?:the )?(?:cuda |hip )?graphs?\b|\bgraph (?:replay|capture)s?\b|"
               r"\bgraphs? (?:were |was |are )?(?:captured|replayed)\b|"
               r"(?:\b|cuda|hip)(?:launch|cuda ?graphs?|too many kernels|(?:small|tiny|short) kernels|kernel overhead|"
               r"cpu overhead|python overhead)|\bkernels? (?:are |is )?(?:too |very )?(?:small|tiny|short)\b"),
    # a gradient sync is a collective ("is the gradient sync overlapped with backward?"), not a host wait
    ("sync", r"\b(?:cpu|host) (?:is |sits? )?(?:wait\w*|block\w*|stall\w*) (?:on|for) (?:the )?(?:gpu|device)\b|"
             r"^(?!.*\b(?:gradients?|grads?)\b).*"
             r"\b(?:sync|synchroni[sz]|\.item\(\)|item\(\)|blocking call|which line|what line|python line|host blocks)|"
             r"\bblock(?:s|ing|ed)?\b.{0,20}\b(?:cpu|host|python|thread)\b|"
             r"(?:cuda|hip)\w*synchroni[sz]"),
    ("longest_gap", r"\b(?:longest|largest|biggest|worst) (?:gap|stall|idle|bubble)"),
    ("dataloader", r"\b(?:data ?load|dataloader|input pipeline|num_workers|workers|prefetch|batches)"),
    ("copies", r"(?:\b|cuda|hip)(?:memcpy|copy|copies|copied|transfer|pageable|pinned|pin_?memory|bandwidth|"
               r"pin(?:ning)?[_ ](?:the |host )?memory|"
               r"data movement|htod|dtoh|pcie|non[_ -]?blocking|"
               r"h2d|d2h)"),
    ("memory", r"\b(?:memory|oom|out of memory|leak|allocat|vram|cudamalloc|cudafree|empty_cache|fragment)"),
    ("communication", r"\b(?:communicat|nccl|rccl|all[- _]?reduce|all[- _]?gather|reduce[- _]?scatter|all[- _]?to[- _]?all|"
                      r"broadcast|collective|overlap|exposed|(?:tensor|data|pipeline|expert|sequence)[- ]parallel\w*|"
                      r"ddp\b|fsdp\b|messages?\b|payloads?\b)"),
    ("annotations", r"\b(?:nvtx|annotation|record_function|ranges?\b|regions?\b|sections? of (?:my )?code)"),
    # "the longest single kernel", "the max kernel duration": one kernel's own runs, not the hottest by total
    ("slow_kernel", r"\b(?:slowest|longest)(?:[- ]running)?(?: single| individual)? kernel|\bper (?:call|launch)\b|"
                    r"\b(?:max(?:imum)?|peak) (?:single )?kernel (?:duration|time|runtime|latency)\b|"
                    r"kernel\b.*\b(?:slow|long)"),
    # the time between kernels is idle time, not the kernels': "why are there gaps between kernels?"
    ("kernels", r"\b(?:eat\w*|consum\w*|tak\w* up|us\w* up)\b.{0,20}\b(?:gpu|device)(?: time)?\b|"
                r"^(?!.*\b(?:gaps?|idle|bubbles?|between kernels)\b).*"
                r"\b(?:kernel|hot|gemm|matmul|hotspot|conv(?!erg)|what runs|most time on the gpu|compute)"),
    ("one_step", r"\bstep\s*#?\d+"),
    # why the GPU idles, said of a step ("why does the GPU go idle every step?"), is the idle answer's
    # what the step's time goes to ("what's eating my step time?") is the summary's, not the step list;
    # why steps are slow ("why is the step so slow?") the verdict's, with the idle behind it; why some are
    # slower than others the step list's
    ("steps", r"^(?!.*\bwhy\b.*\b(?:idle|gaps?|bubbles?|stall\w*)\b)"
              r"(?!.*\bwhy\b(?!.*\b(?:slowest|than|others?|some|vary|varies|variance)\b).*\b(?:slow(?:er)?|long)\b)"
              r"(?!.*" + _TIME_GOES_TO + r").*"
              r"\b(?:steps?|iterations?|step time|per step|slowest step|warm-?up)\b"),
    ("gaps", r"^(?!.*\bwhy\b).*\b(?:gaps?|bubbles?)\b"),
    ("idle", r"\bschedul(?:er|ing) overhead\b|"
             # "is there any GPU work?", "was the GPU used?": how busy it is (a CPU-only trace: that it has none)
             r"\b(?:any|no) (?:gpu|device|cuda) (?:work|activity|kernels?)\b|\b(?:is|was) the gpu (?:used|in use)\b|"
             r"\b(?:use|uses|used|using) the gpu\b|\b(?:where|what) (?:does|is) (?:rank\s*#?\d+|"
             r"(?:the |my )?(?:gpu|device|job|run|rank)(?:\s*#?\d+)?)\b.{0,20}\bspend(?:s|ing)?\b|"
             r"\bwhat (?:is|are|was|were) (?:the |my )?(?:gpus?|devices?|(?:rank|gpu|device)\s*#?\d+) doing\b|"
             # what the host does while the GPU waits: the gaps' causes and the host's evidence
             r"\bwhat (?:does|is|was|did) (?:the |my )?(?:cpu|host|python)\b.{0,20}\bdo(?:ing)?\b.{0,30}"
             r"\b(?:between|during|while|when the (?:gpu|device))\b|"
             + BUSY_IN_WORDS + "|"
             r"\b(?:idle|wait\w*|stall\w*|gaps?|slow\w*|bottleneck\w*|utili[sz]\w*|starv\w*|underutil\w*|busy|why|"
             r"wast\w*)\b"),
    ("summary", r"\b(?:summar|overview|diagnos|what'?s wrong|tell me about|explain|what is (?:going on|happening)|"
                r"report)|\bwhat does (?:the|my|this) (?:trace|timeline|run|profile|job) look like\b|"
                r"\bwhat(?:'s| is| does)? (?:in|inside) (?:the|my|this) (?:trace|profile|file)\b|"
                r"\bwhere (?:is|does) (?:the |my )?time (?:going|go)\b|\bhow efficient\b|" + _TIME_GOES_TO + "|"
                r"\b(?:is|are) (?:my|the|this|it)(?: \w+){0,2} (?:efficient|running well|healthy)\b|"
                r"\bwhat (?:limits|is limiting|holds back|caps)\b|"
                + RUN_LENGTH + "|"
                # the hardware: the summary's first line names the ranks and their GPUs
                r"\b(?:amd|nvidia|rocm|cuda) or (?:amd|nvidia|rocm|cuda)\b|\bwhich (?:gpu )?vendor\b|"
                + GPUS_COUNTED + r"|^(?!.*\b(?:slow\w*|fast\w*|idle|busy|bottleneck|"
                r"straggl\w*|wait\w*|most|least|behind|worst|best)\b).*\b(?:what|which) (?:kind of |type of |model of )?"
                r"(?:gpus?|hardware|accelerators?)\b(?: \w+){0,5}\s*\??\s*$|"
                r"\b(?:gpu|accelerator) (?:model|type|name)\b"),
]]
LIMIT_WORDS: list[tuple[str, re.Pattern]] = [(kind, re.compile(p, re.I)) for kind, p in [
    # kernels bound by the GPU's memory bandwidth, not copies: "memory-bound", "bound by bandwidth"
    ("memory_bound", r"\b(?:memory|bandwidth|dram|hbm)[- ]bound|\bbound by (?:the )?(?:memory|bandwidth|dram|hbm)|"
                     r"\b(?:memory|dram|hbm) bandwidth\b"),
    ("communication", rf"\b(?:communication|comm|nccl|rccl|{LINKS_SAID}|collective|"
                      r"all[- _]?(?:reduce|gather|to[- _]?all)|reduce[- _]?scatter)"),
    ("launch", r"\b(?:launch|overhead)"),
    ("input", r"\b(?:input|data[- ]?load\w*|dataloader|i/?o)\b|\bdata[- ]bound"),
    ("host", r"\b(?:cpu|host|python)\b"),
    ("copies", r"\b(?:memory|bandwidth|copy|copies|memcpy|pcie)"),
    ("compute", r"\b(?:compute|gpu(?! memory)|math|flops?)\b"),
]]
#: what asks about a change between two runs, read only where two are loaded ("did the idle go down?")
_CHANGED = re.compile(r"\b(?:got|get|gets|getting|became|become|went|go|goes|gone|come|came) (?:\w+ )?(?:slower|faster|"
                      r"worse|better|up|down|away)\b|\bchang(?:ed|es)\b|\bpredict(?:ion|ed)\b|\b(?:keep|keeping|revert\w*) "
                      r"(?:the |this |that |my )?change|\b(?:increased|decreased|dropped|rose|grew|shrank|shrunk)\b|"
                      r"\b(?:new|old|first|second|previous|last) (?:run|trace|profile|version)\b|"
                      r"\bnew (?:problems?|issues?|bottlenecks?|limiters?)\b|"
                      r"\b(?:fixed|solved|resolved)\b|"
                      # "is the GPU busier now?", "how much faster is the step now?": a comparison with the run before
                      r"\b(?:faster|slower|quicker|better|worse|busier|less|fewer|more|lower|higher)\b.{0,40}\bnow\b", re.I)
#: words engineers shorten, read as the words the intents know ("gpu util?", "mem bw", "comms"); whole
#: words only, so a kernel's `bn_bw_` or an op's `mem_efficient` stays as written
SHORTHAND = {"mem": "memory", "bw": "bandwidth", "util": "utilization", "perf": "performance", "avg": "average",
             "comms": "communication", "comm": "communication", "xfer": "transfer", "xfers": "transfers"}
_SHORTHAND = re.compile(rf"\b(?:{'|'.join(SHORTHAND)})\b", re.I)
_RANKS = re.compile(rf"\brank\s*#?(\d+)(?:\s*(?:{_VERSUS}|and|to|with|or)\s*#?(\d+))?", re.I)
_DEVICES = re.compile(rf"\b(?:gpu|device|cuda:)\s*#?(\d+)(?:\s*(?:{_VERSUS}|and|to|with|or|than)\s*"
                      r"(?:(?:gpu|device|cuda:)\s*)?#?(\d+))?", re.I)
_STEPS = re.compile(rf"\bsteps?\s*#?(\d+)(?:\s*(?:{_VERSUS}|and|to|-|–|,)\s*"
                    r"(?:step\s*#?)?(\d+))?", re.I)
_THRESHOLD = re.compile(r"\b(?:longer|more|over|above|at least|bigger|larger) than\s*(\d+(?:\.\d+)?)\s*(µs|us|ms|s)\b", re.I)
_SCALE = {"µs": 1.0, "us": 1.0, "ms": 1e3, "s": 1e6}
#: a stretch of the trace named by its times ("between 100 and 200 ms", "at 500 ms"), µs from its first event
_BETWEEN = re.compile(r"\b(?:between|from)\s*(\d+(?:\.\d+)?)\s*(µs|us|ms|s)?\s*(?:and|to|-|–)\s*"
                      r"(\d+(?:\.\d+)?)\s*(µs|us|ms|s)\b", re.I)
_AT_TIME = re.compile(r"\b(?:at|around|near)\s*(?:t\s*=\s*)?(\d+(?:\.\d+)?)\s*(µs|us|ms|s)\b", re.I)
#: the stretch of trace read around a moment named alone ("what is happening at 500 ms?"), µs each side
MOMENT_US = 500.0
#: what asks what happens in a stretch of the trace, once it names one
_HAPPENING = re.compile(r"\b(?:happen\w*|going on|runs?|running|ran|doing|did|busy|active|executing|there)\b", re.I)
_ORDINAL_STEP = re.compile(r"\b(first|second|third|last|final) (?:training |profiled )?(?:step|iteration)\b", re.I)
#: parts of op names that name no block of work of their own (namespaces, directions, plain tensor ops,
#: question words): a question saying them does not name an op
_GENERIC_OP_WORDS = set(("all aten prims c10d nccl rccl cuda hip cudnn miopen native torch autograd engine evaluate "
                          "function forward backward step copy add mul sub div view empty fill zero clone contiguous "
                          "item linear matmul conv softmax norm layer layers model time kernel kernels and inside into "
                          "from gpu gpus device rank ranks vllm sglang call calls data loader take batch batches token "
                          "tokens size").split()) | ENGLISH
#: a statistic said of a measure ("the mean kernel time", "max step duration"): not the op of that name
_STATISTIC = re.compile(r"\b(?:mean|average|max|min|sum|median)\s+(?=(?:kernel|time|duration|latency|step|launch|gap|"
                        r"idle|length|runtime|run|iteration|value|bandwidth|throughput)s?\b)")
#: words of kernel names that name no kernel in particular
_GENERIC_KERNEL_WORDS = {"kernel", "kernels", "native", "void", "float", "const", "unsigned", "template", "anonymous",
                         "namespace", "vectorized", "elementwise", "functor", "cutlass", "device", "global", "memcpy",
                         "pytorch", "torch", "version", "model", "layers", "sequence", "length",
                         "memset", "gemm", "gemms", "sgemm", "matmul", "reduce", "tensor", "tensorop", "attention",
                         "softmax", "convolution", "batch", "stream", "launch", "params", "arguments", "policy",
                         # C++'s operator() is in many kernels' names: a question's "operator" is an op
                         "operator", "operators", "function", "functions", "running",
                         # PyTorch's template namespaces (at::native::memory::LoadWithoutCast, at::detail::Array)
                         "memory", "detail", "array"}
OP_NAME = re.compile(r"[A-Za-z_][\w.]*::[\w.:]+")  # an op as the profiler names it: aten::mm, vllm::moe_forward


@dataclass(frozen=True)
class Question:
    """A question as the offline analyst reads it."""

    text: str
    intent: str | None  # None: not understood
    rank: int | None = None
    device: int | None = None
    steps: list[int] = field(default_factory=list)
    kernel: str | None = None  # a hot kernel of this trace that the question names (its short name)
    op: str | None = None  # an op of this trace that launched kernels and that the question names (aten::mm); for
    # the module intent, the module type named (Sampler)
    min_us: float | None = None
    limit: str | None = None  # for "is it X-bound?": compute, copies, communication, launch, host, input, memory_bound
    foreign: bool = False  # mostly non-Latin script: open questions need a model
    limits: tuple[str, ...] = ()  # every bound the question names ("compute- or memory-bound?"), `limit` first
    ranks: tuple[int, ...] = ()  # every rank the question names, in order, once each ("rank 0 vs 1": 0, 1)
    devices: tuple[int, ...] = ()  # every GPU the question names, in order, once each ("GPU 0 and 1": 0, 1)
    window: tuple[float, float] | None = None  # a stretch of the trace it names, µs from its first event
    # the host's time asked of a rank that ran no GPU work: the answer says that it has none
    host_only: bool = False
    range_name: str | None = None  # the word of a host range's name whose cost is asked ("how much does zero_grad cost?")


def understand(text: str, ctx: AnalysisContext) -> Question:
    """The intent and entities of a question about the loaded trace."""
    text = _SHORTHAND.sub(lambda m: SHORTHAND[m.group(0).lower()], text)  # "mem bw?": memory bandwidth
    # what the question asks is read without the ops it names ("vllm::moe_forward" is not about vLLM's phases)
    words = OP_NAME.sub(" ", text)
    # a registered detector that names its questions answers them first: its words are its own; of
    # several, the first with a result on the rank asked about ("how long is the forward pass?" on
    # an inference trace: the workload's forward passes, not the training phases it lacks)
    # every rank named, in order, once each ("rank 0 vs 1": 0, 1); the first is the one a question about one rank means
    ranks = _numbers_named(_RANKS, text)
    rank = ranks[0] if ranks else None
    named = [d.name for d in DETECTORS if d.asks and d.tool and re.search(d.asks, words, re.I)]
    about = next((r for r in ctx.analysis.ranks if r.rank == rank), ctx.analysis.focus)
    asked = next((n for n in named if about.results.get(n) is not None), named[0] if named else None)
    if asked == "modules" and classes_named(words) and not named_module(words, ctx) and any(
            pattern.search(words) for _, pattern in INTENTS):
        # "is attention or the MLP the bottleneck?" where no module type has those names: the question's own intent
        # (a bound, answered by the classes of work)
        asked = None
    if asked == "time_by_class" and re.search(r"\b(?:batch|layer|group|rms)norms?\b", words, re.I) and (
            named_module(words, ctx) or kernel_word(words, ctx)):
        asked = None  # "how long does RMSNorm take?" where a module or kernels bear the name: theirs, not the class's
    if asked == "op_time" and about.results.get("op_time") is None and about.results.get("host_ops") is not None:
        asked = "host_ops"  # a trace with no device work: its ops' time is host time ("which op takes the most time?")
    intent = f"detector:{asked}" if asked else next((name for name, pattern in INTENTS if pattern.search(words)), None)
    if about.verdict.limiter is None and about.results.get("host_ops") is not None and (
            intent in ("idle", "optimize_first", "bound") or (intent == "summary" and re.search(_TIME_GOES_TO, words, re.I))):
        # "what takes the most time?", "why is my training slow?" of a CPU-only trace: its host time by event
        intent = "detector:host_ops"
    if intent == "optimize_first" and (topic := _topic_to_speed_up(words)):
        intent = topic  # "how can I speed up data loading?": that topic's answer, not the trace's first fix
    if intent == "sync" and re.search(LINE_ASKED, words, re.I) and not re.search(r"\bsync|synchroni|\.?item\(|\bblock",
                                                                                 words, re.I):
        intent = "idle"  # "which line of my code makes the GPU wait?": the idle by line, not only a sync's
    if (intent == "straggler" and len(ctx.analysis.ranks) > 1 and re.search(r"\bsteps?\b|\biterations?\b", words, re.I)
            and not re.search(r"\bstraggl", words, re.I)):
        intent = "steps"  # "which rank has the longest step?", "is the step time the same on all ranks?": each rank's steps
    if intent == "launch" and len(ctx.analysis.ranks) > 1 and re.search(r"\bwhich rank\b.*\bkernels\b", words, re.I):
        intent = "kernels"  # "which rank launches the most kernels?": each rank's kernels, side by side
    if intent == "straggler" and len(ctx.analysis.ranks) == 1 and re.search(r"\b(?:gpus|devices)\b", words, re.I):
        intent = "most_idle"  # "is the load balanced between the GPUs?" of one rank on several GPUs: each GPU's
    if intent == "phases" and about.results.get("phases") is None and re.search(r"\bbatch", words, re.I):
        intent = "batch_size"  # "how many tokens are in the batch?" of a training loop: what its trace says of batches
    elif intent == "batch_size" and about.results.get("phases") is not None and not re.search(_BATCH_CHANGED, words, re.I):
        intent = "phases"  # "what is the batch size?" of an inference server: its decode steps' tokens say it
    if ctx.other is not None and intent not in ("rank_vs_rank", "step_vs_step") and _CHANGED.search(words):
        intent = "compare"  # two runs loaded: "what got slower?", "was the prediction right?" are about the change
    if intent == "compare" and ctx.other is None and ranks and len(ctx.analysis.ranks) > 1:
        intent = "straggler"  # "how does rank 0 compare to the others?" with one job: how that rank stands
    if intent == "compare" and ctx.other is None and _STEPS.search(text):
        intent = "one_step"  # "did step 5 improve?" with one trace: about that step
    if intent == "compare" and ctx.other is None and _PHASE_WORDS.search(text):
        intent = "phases"  # "how long is prefill compared to decode?" with one trace: its phases
    # every GPU named, in order, once each; the first is the one a question about one GPU means
    devices = _numbers_named(_DEVICES, text)
    device = devices[0] if devices else None
    if device is not None and rank is None:
        rank = ctx.rank_of(device)  # "what is GPU 3 doing?" in a job of one GPU a rank: rank 3's
    steps = [int(n) for m in _STEPS.finditer(text) for n in m.groups() if n]
    if not steps and (m := _ORDINAL_STEP.search(text)):  # "the first step": its number in this trace
        steps = _step_by_order(m.group(1).lower(), ctx)
        if steps and intent in (None, "idle", "steps", "summary"):
            intent = "one_step"
    min_us = float(m.group(1)) * _SCALE[m.group(2).lower()] if (m := _THRESHOLD.search(text)) else None
    window = _window(text)
    if window is not None and intent in (None, "summary", "kernels", "idle") and _HAPPENING.search(words):
        intent = "window"  # "what is happening at 500 ms?": the host's and the step's view of that stretch
    limits = _limits(text) if intent == "bound" else ()
    limit = limits[0] if limits else None
    kernel = named_kernel(text, ctx)
    op = None if kernel else named_op(text, ctx)
    module = None if kernel or op else named_module(text, ctx)
    kernel = kernel or (None if op or module else kernel_word(text, ctx))
    if OP_NAME.search(text) and not op:  # an op written that the trace lacks: said so (offline _unknown), not guessed
        kernel, module = (kernel if kernel and OP_NAME.search(kernel) else None), None
    if module and intent in (None, "summary", "kernels", "slow_kernel", "detector:modules"):
        intent, op = "module", module  # "how much time does the sampler take?": that module type's row
    if intent == "bound" and op and not limits and not classes_named(text):
        intent = "op_bound"  # "is the MoE layer the bottleneck?": that op's kernels, replayed faster
    # a question about the GPU's idle time stays the idle answer, whatever it names ("why is the GPU idle in decode?")
    named_over = intent in (None, "summary", "kernels", "slow_kernel") or (intent == "idle" and not IDLE_WORDS.search(text))
    if kernel and named_over:
        intent = "kernel"  # "why is dgrad_engine so slow?": about that kernel
    elif op and (named_over or intent == "detector:host_ops"
                 or (intent == "launch" and re.search(r"\bkernels?\b", text, re.I))
                 or (intent == "steps" and re.search(r"\bhow much of\b|\bshare\b|\bfraction\b|\bpercent", text, re.I))):
        # "where is the time going inside vllm::moe_forward?", "how many kernels does aten::linear launch?",
        # "how much CPU time does aten::linear take?", "how much of the step is aten::convolution?": that op's
        # kernels, calls and host time
        intent = "op"
    letters = [c for c in text if c.isalpha()]
    english = len(set(re.findall(r"[a-z]+", text.lower())) & ENGLISH)
    foreign = bool(letters) and (sum(c.isascii() for c in letters) < len(letters) / 2 or (not english and intent is None))
    range_name = None
    if intent is None and (m := TIME_OF_NAMED.search(text)) and host_range_named(word := named_of(m), ctx):
        intent, range_name = "named_range", word  # "how much does zero_grad cost?": the host ranges named so
    if intent == "rank_vs_rank" and len(ranks) < 2:
        intent = "straggler"  # "rank 3 and its neighbours": about ranks, with one named
    if intent == "device_vs_device" and len(devices) < 2:
        intent = "idle"  # "GPU 1 and its copies": about one GPU
    return Question(text, intent, rank, device, steps, kernel, op, min_us, limit, foreign, limits, ranks, devices, window,
                    intent == "detector:host_ops" and about.verdict.limiter is None, range_name)


def _window(text: str) -> tuple[float, float] | None:
    """The stretch of the trace a question names by its times, µs from its first event: "between 100 and
    200 ms" (the first number takes the second's unit where it has none), or MOMENT_US each side of "at 500 ms"."""
    if m := _BETWEEN.search(text):
        lo = float(m.group(1)) * _SCALE[(m.group(2) or m.group(4)).lower()]
        hi = float(m.group(3)) * _SCALE[m.group(4).lower()]
        return (lo, hi) if hi > lo else None
    if m := _AT_TIME.search(text):
        at = float(m.group(1)) * _SCALE[m.group(2).lower()]
        return max(0.0, at - MOMENT_US), at + MOMENT_US
    return None


def _numbers_named(pattern: re.Pattern, text: str) -> tuple[int, ...]:
    """The numbers a pattern's groups find in the text (ranks, GPUs), in order, once each."""
    return tuple(dict.fromkeys(int(n) for m in pattern.finditer(text) for n in m.groups() if n))


#: the cost of one named thing asked ("how much time is spent in the sampler?", "how much does zero_grad cost?",
#: "how long does train_step take?"): the name, in `what`
_WORD = r"`?(?P<what>[A-Za-z_][\w.#]{3,}?)(?:\(\))?`?"
TIME_OF_NAMED = re.compile(r"\bhow (?:much time|long)\b.{0,25}?\b(?:in|on|by|for|to) (?:the |my |our )?" + _WORD + r"\W*$|"
                           r"\bhow (?:long|much(?: time)?) (?:does|do|did) (?:the |my |our )?" + _WORD.replace("what", "what2")
                           + r" (?:take|cost|last)\b|"
                           r"\bwhat does (?:the |my |our )?" + _WORD.replace("what", "what3") + r" cost\b|"
                           r"\bhow expensive (?:is|are) (?:the |my |our )?" + _WORD.replace("what", "what4") + r"\W*$", re.I)


def named_of(match: re.Match[str]) -> str:
    """The name a TIME_OF_NAMED match asks about."""
    return next(n for n in match.group("what", "what2", "what3", "what4") if n)


def host_range_named(word: str, ctx: AnalysisContext) -> bool:
    """Whether a host range (annotation, op, Python function, batch) of any rank has the word in its name."""
    return any(bool(host_ranges_named(r.trace, word).any()) for r in ctx.analysis.ranks)


#: what a "how do I speed up …?" question names after its verb ("speed up data loading", "make the copies faster")
_SPED_UP = re.compile(r"\b(?:speed up|speed-up|accelerate|optimi[sz]e|improve|fix|make|get|reduce|cut|lower|shorten|"
                      r"decrease|shrink)\s+(?P<what>.+?)"
                      r"(?:\s+(?:faster|quicker|go faster|run faster))?\s*[?.!]*$", re.I)
#: the topics whose own answer says how to speed them up, in the order INTENTS tries them
_SPEED_UP_TOPICS = ("launch", "sync", "dataloader", "copies", "memory", "communication", "kernels")


def _topic_to_speed_up(words: str) -> str | None:
    """The topic a request to speed something up names ("how can I make the copies faster?": copies), or
    None where it names none, or weighs several ("should I fix the dataloader or the kernels first?")."""
    if re.search(r"\bor\b|\bfirst\b|\b(?:most|biggest|best|largest|main|top)\b", words, re.I):
        return None
    if not (m := _SPED_UP.search(words)):
        return None
    what = m.group("what")
    if re.search(r"\bidle\b|\bgaps?\b|\bbubbles?\b", what, re.I):
        return "idle"  # "how do I reduce the idle time?": why the GPU idles, by cause, and the next step
    return next((name for name, pattern in INTENTS if name in _SPEED_UP_TOPICS and pattern.search(what)), None)


def _step_by_order(word: str, ctx: AnalysisContext) -> list[int]:
    """[the step number the word names] (first, second, third, last) among the focus rank's steps, or []."""
    numbers = sorted(int(n) for n in ctx.analysis.focus.trace.steps["step"].dropna().unique())
    at = {"first": 0, "second": 1, "third": 2, "last": -1, "final": -1}[word]
    return [numbers[at]] if numbers and -len(numbers) <= at < len(numbers) else []


def _limits(text: str) -> tuple[str, ...]:
    """The bounds a question names, in LIMIT_WORDS' order; "memory-bound" is about kernels, so
    "memory" then names copies only beside a copy word."""
    named = [kind for kind, pattern in LIMIT_WORDS if pattern.search(text)]
    if "memory_bound" in named and "copies" in named and not re.search(r"\b(?:cop(?:y|ies)|memcpy|pcie)", text, re.I):
        named.remove("copies")
    return tuple(named)


def named_op(text: str, ctx: AnalysisContext) -> str | None:
    """The op (namespace::name) of this trace that launched kernels, or a host range of that name around
    such ops, that the question names: the one written, else the shortest that contains it; a snake_case
    name of an op or range as written (record_param_comms); or a word that is a distinctive part of
    launching ops' names ("the MoE layer": moe, of vllm::moe_forward)."""
    ops = {str(c) for r in ctx.analysis.ranks for c in r.trace.gpu["op"].cat.categories}
    words = {w.lower().rstrip(".") for w in OP_NAME.findall(text)}
    if words:
        # an op around the launching ones is named as written (aten::convolution, around aten::cudnn_convolution)
        host = {str(c) for r in ctx.analysis.ranks for c in r.trace.cpu["name"].cat.categories if "::" in str(c)}
        hits = ([o for o in ops if o.lower() in words] or [o for o in host if o.lower() in words]
                or [o for o in ops if any(w in o.lower() for w in words)]
                or [o for o in host if any(w in o.lower() for w in words)])  # aten::relu: the trace's aten::relu_
        return min(hits, key=lambda o: (len(o), o)) if hits else None
    # a snake_case name that is an op or range of the trace as written (record_param_comms)
    snake = {w.lower() for w in re.findall(r"\b_*[A-Za-z][A-Za-z0-9]*_\w+", text)}
    if snake and (named := {str(c) for r in ctx.analysis.ranks for column in (r.trace.gpu["op"], r.trace.cpu["name"])
                            for c in column.cat.categories if str(c).lower() in snake}):
        return min(named, key=lambda o: (len(o), o))
    # a compound said with hyphens or spaces ("all-to-all", "reduce scatter") that is a whole word
    # of op names as they write it (nccl:all_to_all, c10d::reduce_scatter_, allgather_base)
    tokens = {t.strip("_") for o in ops for t in re.split(r"[^a-z0-9_]+", o.lower())}
    said = re.findall(r"[a-z0-9]+", text.lower())
    for size in (4, 3, 2):
        for at in range(len(said) - size + 1):
            for written in ("_".join(said[at:at + size]), "".join(said[at:at + size])):
                if written in tokens:
                    return written
    parts = {p for o in ops for p in re.split(r"[^a-z0-9]+", o.lower()) if len(p) >= 3}
    plain = _STATISTIC.sub(" ", text.lower())  # "the mean kernel time" names no aten::mean
    asked = [w for w in re.findall(r"[a-z][a-z0-9]{2,}", plain) if w in parts and w not in _GENERIC_OP_WORDS]
    return asked[0] if asked else None


def named_module(text: str, ctx: AnalysisContext) -> str | None:
    """The module type (the modules detector's rows: Sampler, Qwen2RMSNorm, LlamaMLP) that the question
    names: as written, or by the end of its name past the model's prefix ("RMSNorm", "the MLP")."""
    types = {m.name for r in ctx.analysis.ranks if (found := r.results.get("modules")) is not None
             for m in found.modules}
    named = modules_named(text, types)
    return named[0] if named else None


def named_kernel(text: str, ctx: AnalysisContext) -> str | None:
    """The hot kernel (short name) of this trace that the question names, longest first."""
    words = set(re.findall(r"[A-Za-z_][\w:.]{3,}", text))
    if not words:
        return None
    names: set[str] = set()
    for r in ctx.analysis.ranks:
        for k in r.findings.kernels.top:
            names.add(k.short_name)
    lowered = {w.lower() for w in words}
    # a whole name, or a part of one that reads as code (dgrad_engine, cudnn_convolution), not "kernel"
    hits = [n for n in names if n.lower() in lowered or any(("_" in w or "::" in w) and w in n.lower() for w in lowered)]
    return max(hits, key=len) if hits else None


def kernel_word(text: str, ctx: AnalysisContext) -> str | None:
    """A distinctive word of kernels' names that the question says ("RMSNorm": add_rmsnorm_quant_kernel), for a
    question that names no kernel, op or module otherwise: the kernels whose name holds it are what it asks about.
    Two words said as one name first ("rotary embedding": rotary_embedding_kernel), then the word fewest names hold."""
    said = [w.lower() for w in re.findall(r"[A-Za-z]+", text)]
    asked = {w for w in said if len(w) >= 5} - ENGLISH - _GENERIC_OP_WORDS - _GENERIC_KERNEL_WORDS
    if not asked:
        return None
    kernels = {str(c).lower() for r in ctx.analysis.ranks for c in r.trace.gpu["name"].cat.categories}
    pairs = [f"{a}_{b}" for a, b in itertools.pairwise(said) if {a, b} & asked]
    if pair := next((p for p in pairs if any(p in k for k in kernels)), None):
        return pair
    parts = [set(re.split(r"[^a-z0-9]+|_", k)) for k in kernels]
    holding = {w: sum(w in p for p in parts) for w in asked}
    return min((w for w in asked if holding[w]), key=lambda w: (holding[w], -len(w), w), default=None)
