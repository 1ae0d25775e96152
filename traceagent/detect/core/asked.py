"""How questions say what they ask, for the detectors' answer leads (`Detector.lead`) and the agent's
question reader alike, so that both read a question the same way."""

from __future__ import annotations

import re

#: common English words: a question with none of them (and no intent found) is taken to be in another
#: language, and none of them names a module, op or kernel of a trace
ENGLISH = frozenset("the a an is are was why what how which where who my our this that it of to in on for with does do "
                    "did can should i we me you be slow fast time would could will help use using much many more there any "
                    "most all not and or by from longest slowest biggest largest running spent take takes".split())
#: the slowest or longest asked for, or the time per call ("which module is slowest?", "the longest NCCL call")
SLOWEST = re.compile(r"\b(?:slowest|longest)\b|\bper (?:call|launch)\b", re.I)
_YES_OR_NO = re.compile(r"\s*(?:did|does|do|is|are|was|were|has|have|can|could|should|will|would|am)\b", re.I)


def asks_yes_or_no(text: str) -> bool:
    """Whether a question asks for a yes or a no ("did it help?", "is it using fp8?")."""
    return bool(_YES_OR_NO.match(text))
