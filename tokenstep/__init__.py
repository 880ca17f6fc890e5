"""tokenstep: a fast, transparent LLM inference engine.

    from tokenstep import LLM, SamplingParams
    llm = LLM()  # the bundled SmolLM2-135M-Instruct
    print(llm.generate("The capital of France is", SamplingParams(temperature=0))[0].outputs[0].text)
"""

from tokenstep.engine.llm import LLM
from tokenstep.outputs import CompletionOutput, FinishReason, RequestOutput
from tokenstep.params import SamplingParams

__all__ = ["LLM", "SamplingParams", "RequestOutput", "CompletionOutput", "FinishReason"]
__version__ = "0.1.0"
