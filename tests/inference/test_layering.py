"""The layers import downward only: the engine knows nothing of the request path or HTTP, the
request path (serving) nothing of HTTP (api), and the history's modules (models, services, the
admin, keys) nothing of HTTP either. A read of one request then goes one way."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "inference"


def imported_modules(path: Path) -> set[str]:
    """The absolute names of the modules `path` imports (relative imports resolved)."""
    module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    package = module.rsplit(".", 1)[0] if path.name != "__init__.py" else module
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(parent + ([node.module] if node.module else []))
            names.add(base)
            names |= {f"{base}.{alias.name}" for alias in node.names}
    return names


def sources(*parts: str) -> list[Path]:
    found = []
    for part in parts:
        target = PACKAGE / part
        found += sorted(target.rglob("*.py")) if target.is_dir() else [target]
    return found


ENGINE_WINGS = ("gguf", "sample", "spec_decode", "runner", "layers", "models", "kernels", "kv_cache", "timing")


def test_the_engine_rule_covers_every_wing():
    """The engine's rule below reads every module under engine/, its wings' included: each wing is
    where this test expects it, so that a renamed or moved one is noticed here, not silently skipped."""
    engine = PACKAGE / "engine"
    checked = set(sources("engine"))
    for wing in ENGINE_WINGS:
        modules = sorted((engine / wing).rglob("*.py"))
        assert modules and (engine / wing / "__init__.py").is_file(), f"engine/{wing} is gone or moved"
        assert set(modules) <= checked, wing
    assert {p.parent.name for p in engine.glob("*/__init__.py")} <= set(ENGINE_WINGS), "a new wing: add it above"


@pytest.mark.parametrize(
    "layer, forbidden",
    [
        (("engine",), ("inference.serving", "inference.api", "django")),
        (("serving",), ("inference.api",)),
        (("models.py", "services.py", "admin.py", "keys.py"), ("inference.api",)),
    ],
)
def test_no_layer_imports_a_layer_above_it(layer, forbidden):
    upward = [
        f"{path.relative_to(PACKAGE.parent)} imports {name}"
        for path in sources(*layer)
        for name in sorted(imported_modules(path))
        if any(name == above or name.startswith(above + ".") for above in forbidden)
    ]
    assert not upward, upward


@pytest.mark.parametrize(
    "name",
    [
        "kv_cache/coordinator",
        "kv_cache/full_attention",
        "kv_cache/sliding_window",
        "kv_cache/block_pool",
        "kv_cache/recurrent_state",
        "kv_cache/layout",
        "scheduler",
        "sequence",
        "engine",
        "output_processor",
    ],
)
def test_the_engine_loop_imports_no_torch(name):
    """The orchestration (what runs, which blocks, when a request ends) is bookkeeping: tensors
    stay in the model runner, the sampler and the grammar masks, so this reads without torch."""
    imported = imported_modules(PACKAGE / "engine" / f"{name}.py")
    assert not [module for module in imported if module == "torch" or module.startswith("torch.")]
