"""specsweep: find the fastest SGLang + EAGLE-3 configuration on whole GPU nodes.

Importing the package needs no GPU, no CUDA and no SGLang: those live in the ``gpu`` extra
and are only touched on a real GPU node.
"""

__version__ = "0.1.0"
