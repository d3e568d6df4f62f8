# Type stubs of the extension module sinkq._sinkq (python/src/module.cc).
import os
from typing import Any, Iterator, Optional, Sequence, Union

import numpy as np
import numpy.typing as npt

__version__: str

_Path = Union[str, os.PathLike[str]]
# None (full precision), a preset name, a JSON string, a recipe JSON file, or the JSON as a dict.
_Recipe = Union[None, str, os.PathLike[str], dict[str, Any]]

class Error(RuntimeError):
    """A sinkq error: a bad path, recipe field, token id or length; the message names it."""

def presets() -> list[str]: ...
def load(path: _Path, recipe: _Recipe = None, threads: Optional[int] = None) -> Model: ...
def quantize(
    src: _Path,
    out: _Path,
    recipe: _Recipe,
    *,
    force: bool = False,
    fp_dtype: str = "auto",
    threads: Optional[int] = None,
) -> dict[str, Any]: ...

class Generation(Iterator[tuple[int, str]]):
    def __iter__(self) -> Generation: ...
    def __next__(self) -> tuple[int, str]: ...
    def close(self) -> None: ...
    def __enter__(self) -> Generation: ...
    def __exit__(self, *args: Any) -> None: ...
    @property
    def prompt_ids(self) -> list[int]: ...
    @property
    def ids(self) -> list[int]: ...
    @property
    def text(self) -> str: ...
    @property
    def result(self) -> Optional[dict[str, Any]]: ...

class Model:
    @property
    def path(self) -> str: ...
    @property
    def runtime(self) -> str: ...
    @property
    def vocab_size(self) -> int: ...
    @property
    def max_context(self) -> int: ...
    @property
    def prefix_tokens(self) -> list[int]: ...
    @property
    def bos_id(self) -> int: ...
    @property
    def stop_ids(self) -> list[int]: ...
    @property
    def chat_template(self) -> str: ...
    @property
    def config(self) -> dict[str, Any]: ...
    @property
    def recipe(self) -> dict[str, Any]: ...
    def describe(self) -> str: ...
    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]: ...
    def detokenize(self, ids: Sequence[int], skip_special: bool = True) -> str: ...
    def logits(self, ids: Sequence[int]) -> npt.NDArray[np.float32]: ...
    def logprobs(self, ids: Sequence[int], start: int = 1) -> list[float]: ...
    def generate(
        self,
        prompt: Union[str, Sequence[int]],
        max_tokens: int = 64,
        temperature: float = 0.8,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int = 0,
        stop_on_eos: bool = True,
        stop_on_bos: bool = False,
        stop: Union[str, Sequence[str], None] = None,
    ) -> Generation: ...
    def chat(
        self,
        messages: Sequence[Union[dict[str, str], tuple[str, str]]],
        *,
        max_tokens: Optional[int] = None,
        temperature: float = 0.8,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int = 0,
        stop: Union[str, Sequence[str], None] = None,
        stream: bool = False,
    ) -> Union[str, Generation]: ...
    def ppl(
        self,
        text: Optional[str] = None,
        *,
        file: Optional[_Path] = None,
        ctx: Optional[int] = None,
        windows: Optional[int] = None,
        protocol: Optional[str] = None,
        kld: bool = False,
    ) -> dict[str, Any]: ...
    def analyze(
        self,
        *,
        data: Optional[_Path] = None,
        texts: Optional[Sequence[str]] = None,
        samples: int = 8,
        len: Optional[int] = None,
        seed: int = 0,
        eta: float = 64.0,
        bits: int = 4,
        alphas: Sequence[float] = (0.15, 0.45, 0.75, 1.0),
    ) -> dict[str, Any]: ...
