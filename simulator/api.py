"""The simulator's public face: everything the client may use of it, and nothing else.

The client starts a local fleet (`--simulate`), asks what a GPU kind's simulated replica holds (`--gpu-kind`)
and finds the tiny tokenizer the fleet serves with (`--tokenizer sim`) through these names only; import-linter
holds it to that (pyproject.toml: the client imports no other module of `simulator`). The rest of the package
is the server itself, free to change behind this face.
"""

from __future__ import annotations

from simulator.fleet import SimFleet, SimServerSpec
from simulator.kinds import GpuFigures, KindError, UnknownKind, figures
from simulator.tiny_tokenizer import TinyTokenizerError, tiny_tokenizer_dir

__all__ = ["GpuFigures", "KindError", "SimFleet", "SimServerSpec", "TinyTokenizerError", "UnknownKind", "figures",
           "tiny_tokenizer_dir"]
