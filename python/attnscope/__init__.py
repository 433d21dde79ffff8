"""attnscope in Python: attention computed by any PyTorch or HF model, as the records attnscope's
views draw (docs/given.md).

    import attnscope
    out = model(**inputs, output_attentions=True)
    attnscope.given(out.attentions, tokens).save("attention.safetensors")
    attnscope.head_view(out.attentions, tokens)  # in a notebook: bertviz's call, attnscope's views

Every input is checked here, before anything is written: a bad one raises a ValueError naming the
argument and the layout expected.
"""

from .notebook import Page, head_view, model_view, run
from .records import FORMAT, Given, Record, assemble_generate, from_generate, given, prettify

__all__ = [
    "FORMAT", "Given", "Page", "Record", "assemble_generate", "from_generate", "given", "head_view", "model_view",
    "prettify", "run",
]
