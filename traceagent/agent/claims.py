"""The words of an answer checked against the detectors: the cause it blames, and whether it says a
change helped. Numbers are numbers.py's; these are the claims a right number can still carry
wrong ("delayed by cudaStreamSynchronize" when the verdict says launch overhead, "yes, the
change helped" when the span moved 0.2% and the root cause stayed)."""

from __future__ import annotations

import re
from functools import cached_property

from ..detect.compare.diff import DiffResult, diff
from ..detect.core.vocabulary import GAP_ROOT, ROOT_CAUSES
from ..format import percent
from .numbers import CAUSE_MENTION
from .tools import AnalysisContext

# an answer blames a cause with one of these words just before naming it
_BLAME = re.compile(r"\b(?:caused by|due to|because(?: of)?|delayed by|blocked (?:by|on)|stalled (?:by|on)|"
                    r"waiting (?:for|on)|waits (?:for|on)|bottleneck(?:ed)?(?: is| by| on)?|root cause(?: is)?|"
                    r"dominated by|mostly|mainly|primarily|limited by|bound by|comes? from|spent (?:in|on))"
                    r"[\s:]+(?:the |a |an |its |host |gpu |cpu )*(?P<what>(?:[^.;,\n]|\.(?=\S)){1,60})", re.I)
_BOUND = re.compile(r"\b(?P<what>[\w.-]+[\s-]bound)\b", re.I)
# the cause named before the words that blame it: "`host_other` is the main reason"
_REASON = re.compile(r"(?P<what>[^.;\n]{1,60}?)\s+(?:cause\s+)?(?:is|are|was|were)\s+(?:the\s+)?(?:main|primary|"
                     r"biggest|largest|root|real|dominant|chief|key)\s+(?:reason|cause|culprit|bottleneck|problem|limiter)",
                     re.I)
# a leading "Yes" is read before the word boundary the others need: "**Yes:**" starts with no word
HELPED = re.compile(r"^\W*yes\b(?!,? but)|"
                    r"\b(?:(?<!not )helped|(?<!not )improved|(?:is|was|runs?|got|became) (?:\w+ )?(?:faster|quicker)|"
                    r"sped (?:\w+ )?up|speeds? (?:\w+ ){1,2}up|(?<!not )quicker|(?:less|shorter) (?:step )?time|"
                    r"(?<!not )(?<!n't )made (?:\w+ ){0,3}faster|"
                    r"(?<!no )speed-?up|(?<!not )fixed|(?<!not )resolved|went away|is gone|(?<!not )worked|"
                    r"(?:yes|it did)[,.!]? (?:it|the change|the fix))\b", re.I | re.M)
DID_NOT_HELP = re.compile(r"\b(?:did(?:n't| not) (?:help|improve|fix|work|change)|no (?:real |significant |measurable )?"
                          r"(?:improvements?|changes?|difference|speed-?up|gains?)|not (?:fixed|faster|improved)|"
                          r"unchanged|(?:is|was|got|runs?) slower|regress(?:ed|ion)|(?:got |is )worse|"
                          r"(?:remained|stayed|stays|remains|is|was) (?:about |roughly |essentially )?the same|"
                          r"within (?:the )?(?:[\d.]+ ?% )?(?:run-to-run )?noise|[-+]?0(?:\.0+)? ?% (?:faster|slower|change))",
                          re.I)
# a sentence's leading condition restates the question rather than answering it
_CONDITION = re.compile(r"^\W*(?:(?:to|in order to) (?:determine|check|see|find out|know|tell|answer) |i (?:checked|"
                        r"compared|looked at) )?(?:if|whether)\b[^,;:]*[,;:]", re.I)


def stated_conclusion(answer: str) -> tuple[bool, bool]:
    """(says it helped, says it did not), from its sentences that state something: questions and
    the conditions that restate one ("To determine if your change made the step faster, …") are
    not conclusions."""
    helped = not_helped = False
    for sentence in _SENTENCE.finditer(answer):
        text = sentence.group(0)
        end = answer[sentence.end():sentence.end() + 1]
        if end == "?" or (_HYPOTHESIS.match(text) and not _CONDITION.match(text)):
            continue
        text = _CONDITION.sub("", text).strip()
        helped |= bool(HELPED.search(text))
        not_helped |= bool(DID_NOT_HELP.search(text))
    return helped, not_helped


# a sentence that diagnoses (says why, or what limits), and the words that take a cause out of the
# diagnosis: negated, belittled or hypothetical ("not launch overhead", "syncs are minor")
_DIAGNOSES = re.compile(r"\b(?:idle|wait\w*|stall\w*|bottleneck\w*|reasons?|causes?|caused|because|bound|limit\w*|"
                        r"slow\w*|blame\w*|main(?:ly)?|most(?:ly)?|primar\w*|dominat\w*|due|culprit|problem)\b", re.I)
_SENTENCE = re.compile(r"(?:[^.;!?\n]|[.!?](?=\S))+")  # "39.4%" and ".item()" stay inside their sentence
_HYPOTHESIS = re.compile(r"\W*(?:if|whether|unless|were|had|should|suppose)\b", re.I)
# what fixing a finding would save says nothing of which limits the run: the findings are listed so
_SAVING = re.compile(r"\b(?:would|could|might|may|can) (?:save|give back|gain|shave)\b", re.I)
_DISCOUNTED_BEFORE = re.compile(r"\b(?:not|no|never|nor|neither|isn't|aren't|wasn't|rather than|instead of|except|"
                                r"if|whether|unless|only|besides|than)\W+(?:\w+\W+){0,3}$", re.I)
_DISCOUNTED_AFTER = re.compile(r"^[^,(]{0,40}?\b(?:minor|small|little|negligible|less|smaller|tiny|insignificant|"
                               r"not|isn't|aren't|rarely|barely|hardly|ruled out)\b", re.I)


def blamed_causes(answer: str) -> list[str]:
    """The root causes an answer blames, in the order it names them: the cause after words that
    blame ("because of", "delayed by"), before words that do ("is the main reason"), and the one
    cause a diagnosing sentence names that it does not discount (the vocabulary's words for each
    cause, vocabulary.GAP_CAUSES: "the host is blocking on the GPU" names host synchronizations)."""
    found: list[tuple[int, str]] = []
    for m in [*_BLAME.finditer(answer), *_BOUND.finditer(answer), *_REASON.finditer(answer)]:
        if cause := CAUSE_MENTION.search(m.group("what")):
            found.append((m.start(), GAP_ROOT.get(cause.lastgroup or "", cause.lastgroup or "")))
    for sentence in _SENTENCE.finditer(answer):
        text = sentence.group(0)
        if not _DIAGNOSES.search(text) or _HYPOTHESIS.match(text) or _SAVING.search(text):
            continue
        named = {GAP_ROOT.get(c.lastgroup or "", "") for c in CAUSE_MENTION.finditer(text)
                 if not _DISCOUNTED_BEFORE.search(text[:c.start()]) and not _DISCOUNTED_AFTER.search(text[c.end():])}
        if len(named) == 1:
            found.append((sentence.start(), named.pop()))
    ordered: list[str] = []
    for _, root in sorted(found, key=lambda f: f[0]):
        if root and root not in ordered:
            ordered.append(root)
    return ordered


def mentions_cause(answer: str, root: str) -> bool:
    """Whether an answer names a root cause at all: a gap cause of it, its label or its words."""
    word = ROOT_CAUSES.get(root)
    if word is None:
        return False
    return (any(GAP_ROOT.get(m.lastgroup or "") == root for m in CAUSE_MENTION.finditer(answer))
            or word.label.lower() in answer.lower() or bool(word.said and re.search(word.said, answer, re.I)))


class ClaimCheck:
    """Checks an answer's stated cause and before/after conclusion against the analysis."""

    def __init__(self, ctx: AnalysisContext) -> None:
        self.ctx = ctx
        # causes this question's own answer is about (the detectors' draft names them first: "the
        # longest gap … : other host work"), which an answer may name without blaming the program
        self.about: set[str] = set()

    @cached_property
    def comparison(self) -> DiffResult | None:
        return diff(self.ctx.analysis, self.ctx.other) if self.ctx.other is not None else None

    def warnings(self, answer: str) -> list[str]:
        return [w for w in (self.cause(answer), self.conclusion(answer)) if w]

    def cause(self, answer: str) -> str | None:
        """A warning when the answer blames causes and none is a verdict's root cause."""
        return self.cause_warning(blamed_causes(answer))

    def cause_warning(self, blamed: list[str]) -> str | None:
        """A warning when root causes are blamed and none is a verdict's root cause (the job's, the
        compared trace's, or the rank in focus's)."""
        verdicts = [self.ctx.analysis.verdict]
        if self.ctx.other is not None:  # an answer about the trace after a change may name its cause
            verdicts.append(self.ctx.other.verdict)
        if self.ctx.focus is not None:
            verdicts.append(self.ctx.analysis.rank(self.ctx.focus[0]).verdict)
        roots = {v.root_cause for v in verdicts if v.root_cause}
        if not blamed or not roots or (roots | self.about) & set(blamed):
            return None
        verdict = verdicts[-1] if verdicts[-1].root_cause else verdicts[0]
        said = " and ".join(ROOT_CAUSES[c].label for c in blamed if c in ROOT_CAUSES)
        return (f"the answer blames {said}, but the detectors' verdict names "
                f"{ROOT_CAUSES[verdict.root_cause].label if verdict.root_cause in ROOT_CAUSES else verdict.root_cause}: "
                f"{verdict.headline}")

    def conclusion(self, answer: str) -> str | None:
        """A warning when the answer says a change helped (or did not) and the comparison of the
        two traces says otherwise."""
        return self.conclusion_warning(*stated_conclusion(answer))

    def conclusion_warning(self, says_helped: bool, says_not: bool) -> str | None:
        """A warning when an answer's conclusion (it helped, or it did not) is not the comparison's."""
        result = self.comparison
        if result is None:
            return None
        # an answer that says both is weighed where the change helped ("it helped, but did not fix
        # the cause"); where it did not, any sentence that says it helped is wrong ("Yes: faster.
        # … 0.0% faster")
        if (not says_helped and not says_not) or (says_helped and says_not and result.helped):
            return None
        gone = bool(result.root_cause.get("gone"))
        measured = (f"{'step time' if result.time_basis == 'step' else 'the span'} changed {result.slower_pct:+.1f}%"
                    f" and the root cause ({result.root_cause['what']}) went "
                    f"{percent(result.root_cause['before_pct'])} → {percent(result.root_cause['after_pct'])}"
                    f"{' (gone)' if gone else ''}")
        if says_helped and not result.helped:
            return f"the answer says the change helped, but {measured} (within {result.noise_pct:g}% is noise)"
        if says_not and result.helped:
            return f"the answer says the change did not help, but {measured}"
        return None
