"""The ``hf-diffusion`` workload (issue 42, being built): a Hugging Face ``diffusers`` text-to-image pipeline of the
user's, fine-tuned on image–caption drops and served through the same stages as the demos.

So far: its base, a pipeline folder saved with ``save_pretrained``, found, checked and loaded without running its
code or downloading anything (``base``), and the demo bases built from configs (``demo_base``). The workload itself
(its stages) is not registered yet.
"""
