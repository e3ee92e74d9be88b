"""The project index, and the one answer to "is this module mode-sensitive?".

When gradfix runs on a tree, :meth:`ProjectIndex.build` makes one cheap pass over the files: it
hashes each file's bytes (no parse; the bytes the result cache read already) and names it as a
dotted module. A file is parsed (stdlib ``ast``) only when a question needs a class or factory
defined in it, at most once per process, so the index costs a hash per file, not a second
parse of the tree. Each file's analysis notes which other files its questions read
(``ProjectIndex.reads``): its cached result is trusted only while those files are unchanged.

A module is **mode-sensitive** when ``.eval()`` changes what it computes: it holds dropout,
batch norm, instance norm with ``track_running_stats=True``, an RNN/LSTM/GRU with dropout, a
transformer layer, reads ``self.training`` or calls functional dropout/batch norm, or builds a
project/known class that does (transitively, across files). Well-known model factories
(``torchvision.models.*``, ``timm.create_model``, ``transformers`` classes and
``from_pretrained``) are sensitive. It is **mode-free** only when everything it builds is known
to act the same in both modes; anything else is **unknown**, never mode-free.
"""

from __future__ import annotations

import ast
import hashlib
import os
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Iterable

SENSITIVE, FREE, UNKNOWN = "sensitive", "free", "unknown"

# torch.nn layers that compute the same thing in train and eval mode (pinned in
# tests/facts/test_gf104_facts.py).
MODE_FREE_LAYERS = frozenset(
    """Linear Bilinear Identity Flatten Unflatten Conv1d Conv2d Conv3d ConvTranspose1d
    ConvTranspose2d ConvTranspose3d ReLU ReLU6 LeakyReLU PReLU ELU SELU CELU GELU SiLU Mish
    Tanh Sigmoid Hardtanh Hardsigmoid Hardswish Softmax LogSoftmax Softplus Softsign Tanhshrink
    MaxPool1d MaxPool2d MaxPool3d AvgPool1d AvgPool2d AvgPool3d AdaptiveAvgPool1d
    AdaptiveAvgPool2d AdaptiveAvgPool3d AdaptiveMaxPool1d AdaptiveMaxPool2d AdaptiveMaxPool3d
    Embedding EmbeddingBag Upsample UpsamplingNearest2d UpsamplingBilinear2d PixelShuffle
    PixelUnshuffle ZeroPad2d ConstantPad1d ConstantPad2d ConstantPad3d ReflectionPad1d
    ReflectionPad2d ReplicationPad1d ReplicationPad2d LayerNorm GroupNorm LocalResponseNorm
    CosineSimilarity PairwiseDistance Parameter ParameterList ParameterDict""".split()
)
MODE_SENSITIVE_LAYERS = frozenset(
    """Dropout Dropout1d Dropout2d Dropout3d AlphaDropout FeatureAlphaDropout BatchNorm1d
    BatchNorm2d BatchNorm3d LazyBatchNorm1d LazyBatchNorm2d LazyBatchNorm3d SyncBatchNorm RReLU
    Transformer TransformerEncoder TransformerDecoder TransformerEncoderLayer
    TransformerDecoderLayer""".split()
)
CONTAINERS = frozenset({"Sequential", "ModuleList", "ModuleDict"})
# Sensitive only with an argument: InstanceNorm(track_running_stats=True), LSTM(dropout=0.5).
_RUNNING_STATS = frozenset({"InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d"})
_RNN = {"RNN": 4, "LSTM": 4, "GRU": 4, "MultiheadAttention": 2}  # name -> position of `dropout`
# Drop-in replacements of torch.nn layers in other libraries (same constructor arguments).
_OPACUS_LAYERS = {"DPLSTM": "LSTM", "DPGRU": "GRU", "DPRNN": "RNN", "DPMultiheadAttention": "MultiheadAttention"}
# PyTorch Geometric layers with no dropout, normalisation or `self.training` read and no
# module argument (checked in pyg-team/pytorch_geometric@5c6461b: torch_geometric/nn/conv/ and
# models/lightgcn.py); GATConv, APPNP, CGConv(batch_norm=True)... are not among them.
_PYG_MODE_FREE = frozenset(
    """SAGEConv GCNConv GraphConv ChebConv SGConv SSGConv TAGConv LGConv GCN2Conv
    ResGatedGraphConv GatedGraphConv SplineConv GMMConv FeaStConv LEConv ClusterGCNConv EGConv
    GravNetConv SimpleConv AGNNConv MixHopConv RGCNConv LightGCN""".split()
)
_MODE_FUNCTIONS = re.compile(r"^(dropout\w*|\w*_dropout|batch_norm|instance_norm|drop_path\w*|DropPath|alpha_dropout|rrelu)$")


def _reads_mode(func) -> bool:
    """A method that reads ``self.training`` or calls functional dropout / batch norm / drop path."""
    for node in ast.walk(func):
        if isinstance(node, ast.Attribute) and node.attr == "training":
            return True
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            if _MODE_FUNCTIONS.match(name):
                return True
    return False
_KNOWN_SENSITIVE = re.compile(
    r"^(torchvision\.models\.|timm\.create_model$|timm\.models\.|transformers\.|torch\.hub\.load$|"
    r"segmentation_models_pytorch\.|efficientnet_pytorch\.|pretrainedmodels\.)|\.from_pretrained$"
)
_BUILTIN_CALLS = frozenset(dir(__import__("builtins")))
# Classes that are nn.Modules outside torch.nn, and torch.nn names that are not.
_MODULE_CLASSES = frozenset({"pytorch_lightning.LightningModule", "lightning.LightningModule", "lightning.pytorch.LightningModule"})
_NOT_MODULES = frozenset({
    "torch.nn.Parameter", "torch.nn.parameter.Parameter", "torch.nn.functional",
    # training drivers: their `.train()` runs a training loop, they have no `.eval()`
    "transformers.Trainer", "transformers.Seq2SeqTrainer", "transformers.trainer.Trainer",
    "trl.SFTTrainer", "trl.DPOTrainer", "trl.PPOTrainer", "trl.RewardTrainer",
    "pytorch_lightning.Trainer", "lightning.Trainer", "lightning.pytorch.Trainer",
    "accelerate.Accelerator", "ignite.engine.Engine",
})
# Methods of plain Python values seen in constructors: they build no layer.
_PLAIN_METHODS = frozenset(
    "get pop append extend insert items keys values update setdefault copy format split join strip "
    "lower upper replace startswith endswith index count add remove".split()
)


def combine(verdicts: Iterable[str]) -> str:
    """Sensitive if any part is; free only if every part is."""
    out = FREE
    for v in verdicts:
        if v == SENSITIVE:
            return SENSITIVE
        if v == UNKNOWN:
            out = UNKNOWN
    return out


def torch_layer_verdict(name: str, call: ast.Call | None) -> str | None:
    """The verdict for ``torch.nn.<name>(...)``, None when ``name`` is not a layer we know."""
    if name in MODE_SENSITIVE_LAYERS:
        return SENSITIVE
    if name in MODE_FREE_LAYERS or name in CONTAINERS:
        return FREE  # a container's children are judged as calls of their own
    if name in _RUNNING_STATS:
        flag = _keyword(call, "track_running_stats")
        return SENSITIVE if flag is not None and not _false(flag) else FREE
    if name in _RNN:
        value = _keyword(call, "dropout")
        if value is None and call is not None and len(call.args) > _RNN[name]:
            value = call.args[_RNN[name]]
        if value is None or (isinstance(value, ast.Constant) and not value.value):
            return FREE
        return SENSITIVE
    if name.endswith("Loss"):
        return FREE
    return None


def _keyword(call: ast.Call | None, name: str) -> ast.expr | None:
    if call is None:
        return None
    return next((k.value for k in call.keywords if k.arg == name), None)


def _false(expr: ast.expr) -> bool:
    return isinstance(expr, ast.Constant) and not expr.value


# -- one file's names ---------------------------------------------------------------------


def module_level_names(tree: ast.Module, module: str, package: bool = False) -> dict[str, str]:
    """Local name -> qualified name for a module's top-level imports and definitions
    (relative imports resolved against ``module``, a package's ``__init__`` when ``package``)."""
    names: dict[str, str] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Import):
            for alias in stmt.names:
                names[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else alias.name.split(".")[0]
        elif isinstance(stmt, ast.ImportFrom):
            base = absolute_module(stmt, module, package)
            for alias in stmt.names:
                if alias.name != "*":
                    names[alias.asname or alias.name] = f"{base}.{alias.name}" if base else alias.name
        elif isinstance(stmt, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names[stmt.name] = f"{module}.{stmt.name}" if module else stmt.name
    return names


def absolute_module(stmt: ast.ImportFrom, module: str, package: bool = False) -> str:
    """The module a from-import in ``module`` reads (``from ..utils import x`` in ``pkg.a.b``:
    ``pkg.utils``). In a package's ``__init__`` (``package``), ``.`` is the package itself:
    ``from .resnet import ResNet`` in ``pkg/models/__init__.py`` reads ``pkg.models.resnet``."""
    base = stmt.module or ""
    if not stmt.level:
        return base
    parts = module.split(".") if module else []
    drop = stmt.level - 1 if package else stmt.level
    parts = parts[: len(parts) - drop] if drop <= len(parts) else []
    return ".".join([*parts, base] if base else parts)


# What `from <torch module> import *` binds of the names the rules ask about: the module's
# `__all__` (pinned in tests/facts/test_star_import_facts.py).
_TORCH_STAR = {
    "torch": ("no_grad", "enable_grad", "inference_mode", "save"),
    "torch.autograd": ("Variable", "no_grad", "enable_grad", "set_grad_enabled", "inference_mode", "grad", "backward"),
}


def torch_star_exports(module: str) -> dict[str, str]:
    return {name: f"{module}.{name}" for name in _TORCH_STAR.get(module, ())}


def _dunder_all(tree: ast.Module) -> set[str] | None:
    """The names a module's top-level ``__all__ = [...]`` lists, when it lists literal strings."""
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in stmt.targets):
            value = stmt.value
            if isinstance(value, (ast.List, ast.Tuple)) and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in value.elts):
                return {e.value for e in value.elts}
            return None
    return None


def qualify(names: dict[str, str], expr: ast.AST) -> str | None:
    from gradfix.facts import dotted_name  # here: the index alone (a warm cached run) needs no facts

    name = dotted_name(expr)
    if name is None:
        return None
    head, _, rest = name.partition(".")
    if head not in names:
        return None
    target = names[head]
    return f"{target}.{rest}" if rest else target


# -- the index ------------------------------------------------------------------------------

_CLASS_LINE = re.compile(r"^class\s+(\w+)\s*(?:\(([^)]*)\))?\s*:", re.M)
_DEF_LINE = re.compile(r"^(?:async\s+)?def\s+(\w+)", re.M)
_IMPORT_LINE = re.compile(r"^(?:from\s+(\.*[\w.]*)\s+import|import\s+([\w.]+))", re.M)


@dataclass(frozen=True)
class ModuleEntry:
    """One indexed file: where it is and the sha1 of the bytes the index read.

    Its outline (classes with their bases, top-level functions, imported modules), found by
    regular expressions on top-level lines, is read from the file when first asked for (no
    question of the rules needs it; :meth:`ProjectIndex.import_graph` does).
    """

    path: str
    sha1: str

    @cached_property
    def _outline(self) -> tuple[tuple, tuple, tuple]:
        try:
            with open(self.path, "rb") as handle:
                data = handle.read()
        except OSError:
            data = b""
        if hashlib.sha1(data).hexdigest() != self.sha1:
            return (), (), ()  # changed since it was indexed
        text = data.decode("utf-8", errors="replace")
        return (
            tuple((m.group(1), " ".join((m.group(2) or "").split())) for m in _CLASS_LINE.finditer(text)),
            tuple(m.group(1) for m in _DEF_LINE.finditer(text)),
            tuple(m.group(1) or m.group(2) for m in _IMPORT_LINE.finditer(text)),
        )

    @property
    def classes(self) -> tuple[tuple[str, str], ...]:  # (name, bases as written)
        return self._outline[0]

    @property
    def functions(self) -> tuple[str, ...]:
        return self._outline[1]

    @property
    def imports(self) -> tuple[str, ...]:  # imported module names as written (relative ones with dots)
        return self._outline[2]


@dataclass
class ProjectIndex:
    """Every file of the run, by dotted module name (see the module docstring).

    ``reads``, while not None, collects the files a question read (absolute path -> sha1):
    the runner sets it around each file's analysis, and the result cache checks those files'
    bytes before it trusts that file's entry.
    """

    modules: dict[str, ModuleEntry] = field(default_factory=dict)
    reads: dict[str, str] | None = field(default=None, compare=False, repr=False)
    # Files parsed for a question, shared by every file checked in this process.
    _parsed: dict[str, tuple | None] = field(default_factory=dict, compare=False, repr=False)

    def __getstate__(self):  # a worker process gets the index, not this process's parse trees
        return {"modules": self.modules, "reads": None, "_parsed": {}}

    @classmethod
    def build(cls, paths: Iterable[str], root: str | None = None, sources: dict[str, bytes] | None = None) -> "ProjectIndex":
        """The index of the ``.py`` files among ``paths``; ``sources``: bytes already read,
        by absolute path (each file is read once per run)."""
        paths = sorted({os.path.abspath(p) for p in paths if p.endswith(".py")})
        if root is None and paths:
            root = os.path.commonpath([os.path.dirname(p) for p in paths])
        index = cls()
        for path in paths:
            if sources is not None:
                data = sources.get(path)  # the caller read every regular file it could
                if data is None:
                    continue
            else:
                try:
                    if not os.path.isfile(path):
                        continue  # a FIFO would block open() forever
                    with open(path, "rb") as handle:
                        data = handle.read()
                except OSError:
                    continue
            index._add(module_name(path, root or os.path.dirname(path)), path, data)
        return index

    def add(self, module: str, path: str, text: str, sha1: str | None = None) -> None:
        self._add(module, path, text.encode("utf-8", errors="replace"), sha1)

    def _add(self, module: str, path: str, data: bytes, sha1: str | None = None) -> None:
        # Prefilter by text: only a file that could define a class or a function is indexed.
        # (On the bytes: UTF-8 never hides an ASCII word inside another character.)
        if b"class " not in data and b"def " not in data and b"import" not in data:
            return
        self.modules[module] = ModuleEntry(path, sha1 or hashlib.sha1(data).hexdigest())

    def digest(self) -> str:
        """A stable hash of what the index read: module names, paths' contents (sha1)."""
        h = hashlib.sha256()
        for module in sorted(self.modules):
            h.update(f"{module}\0{self.modules[module].sha1}\n".encode())
        return h.hexdigest()

    def layout_digest(self) -> str:
        """A stable hash of which modules there are and where (not of their contents): what
        every question depends on besides the files it reads (see ``reads``)."""
        h = hashlib.sha256()
        for module in sorted(self.modules):
            h.update(f"{module}\0{self.modules[module].path}\n".encode("utf-8", "surrogateescape"))
        return h.hexdigest()

    @cached_property
    def sha1_by_path(self) -> dict[str, str]:
        return {entry.path: entry.sha1 for entry in self.modules.values()}

    def parsed(self, module: str):
        """``(tree, top-level names)`` of an indexed module, parsed once per process; None when
        it is not indexed, cannot be parsed or changed since it was indexed (unknown, not a
        guess). Notes the read in ``reads``."""
        entry = self.modules.get(module)
        if entry is None:
            return None
        if self.reads is not None:
            self.reads[entry.path] = entry.sha1
        if module not in self._parsed:
            self._parsed[module] = None
            try:
                with open(entry.path, "rb") as handle:
                    data = handle.read()
                if hashlib.sha1(data).hexdigest() == entry.sha1:
                    tree = ast.parse(data)
                    self._parsed[module] = (tree, module_level_names(tree, module, self.is_package(module)))
            except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
                pass
        return self._parsed[module]

    def is_package(self, module: str) -> bool:
        """Whether ``module`` is a package's ``__init__.py``."""
        entry = self.modules.get(module)
        return entry is not None and os.path.basename(entry.path) == "__init__.py"

    def module_of(self, path: str) -> str | None:
        """The dotted name the index gives the file at ``path``, or None."""
        return self._module_by_path.get(os.path.abspath(path))

    @cached_property
    def _module_by_path(self) -> dict[str, str]:
        return {entry.path: module for module, entry in self.modules.items()}

    def star_exports(self, module: str, depth: int = 0) -> dict[str, str]:
        """What ``from module import *`` binds, name -> qualified name, for a project module:
        its ``__all__`` when it lists literal strings, else its public top-level names (its own
        imports included: ``from torch.autograd import Variable`` there is ``Variable`` here),
        and what its own star imports bind (a few levels down). Empty when the module is not
        indexed or does not parse; each file read is noted in ``reads``."""
        parsed = self.parsed(module)
        if parsed is None:
            return {}
        tree, names = parsed
        out: dict[str, str] = {}
        if depth < 3:
            for stmt in tree.body:
                if isinstance(stmt, ast.ImportFrom) and any(a.name == "*" for a in stmt.names):
                    source = absolute_module(stmt, module, self.is_package(module))
                    if source in self.modules:
                        out.update(self.star_exports(source, depth + 1))
                    else:
                        out.update(torch_star_exports(source))
        out.update(names)
        for stmt in tree.body:  # a name its code also binds (`x = ..`, `for x in`): unknown here
            if not isinstance(stmt, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                for node in ast.walk(stmt):
                    if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
                        out.pop(node.id, None)
        listed = _dunder_all(tree)
        if listed is not None:
            return {n: t for n, t in out.items() if n in listed}
        return {n: t for n, t in out.items() if not n.startswith("_")}

    # -- questions ------------------------------------------------------------------------
    def find_module(self, qualname: str, near: str = "") -> str | None:
        """The project module that defines ``pkg.mod.Name``: a sibling of the importing module
        ``near`` first (a script's own directory is on ``sys.path``: ``from model import Net``
        next to ``main.py``), then the exact name, then a unique suffix."""
        module = qualname.rpartition(".")[0]
        package = near.rpartition(".")[0]
        while True:
            candidate = f"{package}.{module}" if package else module
            if candidate in self.modules:
                return candidate
            if not package:
                break
            package = package.rpartition(".")[0]
        hits = [m for m in self.modules if m.endswith("." + module)]
        return hits[0] if len(hits) == 1 else None

    def import_graph(self) -> dict[str, set[str]]:
        """Project module -> project modules it imports (relative imports resolved)."""
        graph: dict[str, set[str]] = {}
        for module, entry in self.modules.items():
            targets = set()
            for imported in entry.imports:
                if imported.startswith("."):
                    level = len(imported) - len(imported.lstrip("."))
                    base = module.split(".")[:-level]
                    imported = ".".join([*base, imported.lstrip(".")]) if imported.strip(".") else ".".join(base)
                found = self.find_module(imported + ".x")
                if found is not None:
                    targets.add(found)
            graph[module] = targets
        return graph


def module_name(path: str, root: str) -> str:
    rel = os.path.relpath(os.path.abspath(path), root)
    parts = rel[:-3].replace(os.sep, ".").split(".") if rel.endswith(".py") else rel.split(os.sep)
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(p for p in parts if p and p != "..")


# -- sensitivity ----------------------------------------------------------------------------


class Sensitivity:
    """Answers "is this class / constructor call mode-sensitive?" for one run.

    ``local`` is the file being checked (its tree and module name), judged from the tree
    already parsed; other classes come from the project index, parsed on demand.
    """

    def __init__(self, index: ProjectIndex | None, tree: ast.Module, module: str = ""):
        self.index = index
        package = index is not None and index.is_package(module)
        self.trees: dict[str, tuple[ast.Module, dict[str, str]] | None] = {module: (tree, module_level_names(tree, module, package))}
        self.module = module
        self._classes: dict[object, str] = {}

    def _top_level(self, module: str) -> list[ast.stmt]:
        loaded = self._load(module)
        return loaded[0].body if loaded is not None else []

    def _load(self, module: str):
        if module not in self.trees:
            self.trees[module] = self.index.parsed(module) if self.index is not None else None
        return self.trees[module]

    def of_qualname(self, qualname: str, call: ast.Call | None = None, depth: int = 0, near: str | None = None) -> str:
        """Verdict for constructing/calling ``qualname`` (a torch layer, a known factory, a
        class or factory function of the project)."""
        try:
            return self._of_qualname(qualname, call, depth, near)
        except RecursionError:  # a pathological file elsewhere must not sink this one
            return UNKNOWN

    def _of_qualname(self, qualname: str, call: ast.Call | None, depth: int, near: str | None) -> str:
        if qualname.startswith("torch.nn."):
            verdict = torch_layer_verdict(qualname[len("torch.nn.") :], call)
            return verdict if verdict is not None else UNKNOWN
        if _KNOWN_SENSITIVE.search(qualname):
            return SENSITIVE
        last = qualname.rpartition(".")[2]
        if qualname.startswith("opacus.") and last in _OPACUS_LAYERS:  # DPLSTM: torch's LSTM, per-sample grads
            return torch_layer_verdict(_OPACUS_LAYERS[last], call) or UNKNOWN
        if qualname.startswith("torch_geometric.nn.") and last in _PYG_MODE_FREE:
            return FREE
        if depth > 8:
            return UNKNOWN
        found = self.defining_module(qualname, near)
        if found is None:
            return UNKNOWN
        module, tree, names = found
        name = qualname.rpartition(".")[2]
        stmt = top_level_definition(tree, name)
        if isinstance(stmt, ast.ClassDef):
            return self._class(module, stmt, names, depth)
        if stmt is not None:
            return self._factory(module, stmt, names, depth)
        # Re-exported (`from .resnet import ResNet` in a package's __init__).
        if name in names and names[name] != qualname:
            return self.of_qualname(names[name], call, depth + 1, module)
        return UNKNOWN

    def defining_module(self, qualname: str, near: str | None):
        """``(module, tree, names)`` of the project module that defines ``qualname`` (this
        file's, or the one the index finds from ``near``), or None."""
        near = self.module if near is None else near
        module = self.module if qualname.rpartition(".")[0] == self.module else None
        if module is None and self.index is not None:
            module = self.index.find_module(qualname, near)
        loaded = self._load(module) if module is not None else None
        return None if loaded is None else (module, *loaded)

    def is_module_class(self, qualname: str, depth: int = 0, near: str | None = None) -> bool | None:
        """Whether ``qualname`` names a class deriving (transitively) from ``torch.nn.Module``:
        True for torch.nn's classes and LightningModule, False for a project class whose bases
        all resolve to project classes that are not modules (or to none: `class Sequential:`,
        a notebook's own container with `__call__`, has no `.eval()`), None when unknown."""
        if qualname in _NOT_MODULES:
            return False
        if qualname in _MODULE_CLASSES:
            return True
        if qualname.startswith("torch.nn."):  # a class (`Linear`), not a function (`functional.relu`)
            path = qualname.split(".")
            return True if path[-1][:1].isupper() and path[2] not in ("functional", "init", "utils") else None
        if depth > 8 or qualname in _BUILTIN_CALLS:
            return False if qualname == "object" else None
        found = self.defining_module(qualname, near)
        if found is None:
            return None
        module, tree, names = found
        name = qualname.rpartition(".")[2]
        stmt = top_level_definition(tree, name)
        if isinstance(stmt, ast.ClassDef):
            verdicts = []
            for base in stmt.bases:
                qual = qualify(names, base)
                if qual is None and isinstance(base, ast.Name) and base.id in _BUILTIN_CALLS:
                    qual = base.id  # `object`, `dict`: no module
                verdicts.append(self.is_module_class(qual, depth + 1, module) if qual else None)
            if any(v is True for v in verdicts):
                return True
            return False if all(v is False for v in verdicts) and not stmt.keywords else None
        if stmt is not None:
            return None  # a factory: what it returns is another question
        if name in names and names[name] != qualname:
            return self.is_module_class(names[name], depth + 1, module)
        return None

    def of_call(self, call: ast.Call, names: dict[str, str], depth: int = 0, near: str | None = None) -> str:
        if not isinstance(call, ast.Call):
            return UNKNOWN  # `return model.cuda()` in a factory: strip_moves leaves the name
        qual = qualify(names, call.func)
        if qual is None:
            return UNKNOWN
        return self.of_qualname(qual, call, depth + 1, near)

    def _class(self, module: str, cls: ast.ClassDef, names: dict[str, str], depth: int) -> str:
        # a class defined in a function is no module attribute: two of one name are two classes
        key = f"{module}.{cls.name}" if cls in self._top_level(module) else (module, id(cls))
        if key in self._classes:
            return self._classes[key]
        self._classes[key] = UNKNOWN  # a cycle stays unknown
        verdicts = []
        for base in cls.bases:
            qual = qualify(names, base)
            if qual in ("torch.nn.Module", "torch.nn.modules.module.Module"):
                continue
            verdicts.append(self.of_qualname(qual, None, depth + 1, module) if qual else UNKNOWN)
        if any(_reads_mode(m) for m in cls.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))):
            verdicts.append(SENSITIVE)
        for call in _building_calls(cls):
            verdicts.append(self.built(call, names, depth, module))
            if verdicts[-1] == SENSITIVE:
                break
        self._classes[key] = result = combine(verdicts)
        return result

    def called_attribute(self, value: ast.AST, names: dict[str, str], attr: str) -> str:
        """Verdict for ``m.attr(...)`` where ``m = value``: the method ``attr`` of the project
        class ``value`` builds when it defines one (:meth:`_method`), else the verdict of the
        module itself (``attr`` is a submodule, or the class is not the project's)."""
        value = strip_moves(value)
        qual = qualify(names, value.func) if isinstance(value, ast.Call) else None
        found = self.defining_module(qual, None) if qual else None
        cls = top_level_definition(found[1], qual.rpartition(".")[2]) if found else None
        if isinstance(cls, ast.ClassDef):
            try:
                if any(_defines(cls, attr)):
                    return self._method(found[0], cls, found[2], attr, 0, set())
                verdict = self._submodule(found[0], cls, found[2], attr, 0)
                if verdict is not None:
                    return verdict
            except RecursionError:
                return UNKNOWN
        if not isinstance(value, ast.Call):
            return UNKNOWN
        return combine(self.built(c, names, 0) for c in ast.walk(value) if isinstance(c, ast.Call))

    def _method(self, module: str, cls: ast.ClassDef, names: dict[str, str], name: str, depth: int, seen: set) -> str:
        """What running method ``name`` of ``cls`` reads of the mode: sensitive when it reads
        ``self.training`` or calls functional dropout, or runs ``self(...)``/``self.forward``
        of a sensitive class, or a submodule built sensitive; free when everything it runs on
        ``self`` is known to be mode-free; unknown otherwise."""
        if name in seen or depth > 8:
            return FREE if name in seen else UNKNOWN  # a cycle adds nothing new
        seen.add(name)
        func = next(_defines(cls, name))
        if _reads_mode(func):
            return SENSITIVE
        verdicts = []
        for node in ast.walk(func):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "self":
                verdicts.append(self._class(module, cls, names, depth + 1))  # self(x): the forward
            if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"):
                continue
            if node.attr == "forward" or node.attr == "__call__":
                verdicts.append(self._class(module, cls, names, depth + 1))
            elif any(_defines(cls, node.attr)):
                verdicts.append(self._method(module, cls, names, node.attr, depth + 1, seen))
            elif _runs(func, node):
                verdicts.append(self._submodule(module, cls, names, node.attr, depth + 1) or UNKNOWN)
            if verdicts and verdicts[-1] == SENSITIVE:
                return SENSITIVE
        return combine(verdicts)

    def _submodule(self, module: str, cls: ast.ClassDef, names: dict[str, str], attr: str, depth: int) -> str | None:
        """The verdict of what the class binds to ``self.attr`` (``self.attr = X(...)``,
        ``self.attr.append(X(...))`` in its constructor); unknown when it binds anything but
        calls (``self.attr = layer``, ``nn.Sequential(*layers)``), None when it binds nothing."""
        values = []
        for call in _building_calls(cls):
            f = call.func
            if isinstance(f, ast.Attribute) and f.attr in ("append", "extend", "insert", "add_module") and _is_self_attr(f.value, attr):
                values += call.args
        for stmt in ast.walk(cls):
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                if any(_is_self_attr(t, attr) for t in targets):
                    values.append(stmt.value)
        if not values:
            return None
        verdicts = []
        for value in values:
            calls = [c for c in ast.walk(value) if isinstance(c, ast.Call)]
            if not isinstance(strip_moves(value), (ast.Call, ast.List, ast.Tuple, ast.ListComp)) or any(
                isinstance(n, ast.Starred) for n in ast.walk(value)
            ):
                return UNKNOWN
            verdicts += [self.built(c, names, depth, module) for c in calls]
        return combine(verdicts)

    def built(self, call: ast.Call, names: dict[str, str], depth: int, near: str | None = None) -> str:
        from gradfix.facts import dotted_name

        func = call.func
        if isinstance(func, ast.Name) and func.id in _BUILTIN_CALLS and func.id not in names:
            return FREE
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in ("self", "super"):
            return FREE  # its own helpers are walked as part of the class
        if isinstance(func, ast.Call) and isinstance(func.func, ast.Name) and func.func.id == "super":
            return FREE  # super().__init__(...)
        qual = qualify(names, func)
        if qual is None:
            if isinstance(func, ast.Attribute) and (dotted_name(func) is None or func.attr in _PLAIN_METHODS):
                return FREE  # `torch.zeros(3).uniform_()`, `layers.append(...)`, `cfg.get(...)`
            return UNKNOWN  # `act_layer()`, `builder.build(cfg)`: could build anything
        if qual.startswith("torch.") and not qual.startswith("torch.nn.") or qual.startswith("torch.nn.init") or qual.startswith("torch.nn.functional"):
            return FREE  # tensor maths, initialisers
        if qual.split(".")[0] in ("math", "numpy", "np", "functools", "collections", "copy", "itertools", "warnings", "logging"):
            return FREE
        return self.of_qualname(qual, call, depth + 1, near)

    def _factory(self, module: str, func, names: dict[str, str], depth: int, index: int | None = None) -> str:
        """A function that returns a constructed module (``def resnet18(): return ResNet(...)``),
        or with ``index`` element ``index`` of the tuple it returns (``return model, loss_fn,
        opt``). A class it defines itself (``def get_model(): class Net(nn.Module): ...``, common
        in notebooks) is judged by its own body. Only the function's own code counts: a
        ``return`` in a method of such a class returns from that method."""
        from gradfix.analysis.statements import own_nodes  # (the index alone imports no analysis)

        own = own_nodes(func)
        returned = [n.value for n in own if isinstance(n, ast.Return) and n.value is not None]
        if index is not None:
            if not all(isinstance(r, ast.Tuple) and index < len(r.elts) and not any(isinstance(e, ast.Starred) for e in r.elts) for r in returned):
                return UNKNOWN
            returned = [r.elts[index] for r in returned]
        if not returned or not all(isinstance(r, (ast.Call, ast.Name)) for r in returned):
            return UNKNOWN
        nested = {n.name: n for n in own if isinstance(n, ast.ClassDef)}

        def of(value: ast.AST) -> str:
            # every call of the expression, as for a binding (`nn.Sequential(nn.Dropout(..))`)
            verdicts = []
            for call in (n for n in ast.walk(value) if isinstance(n, ast.Call)):
                if isinstance(call.func, ast.Name) and call.func.id in nested:
                    verdicts.append(self._class(module, nested[call.func.id], names, depth))
                else:
                    verdicts.append(self.built(call, names, depth, module))
            return combine(verdicts)

        verdicts = []
        for value in returned:
            if isinstance(value, ast.Name):  # `model = Net(); model.load(...); return model`
                bound = [a.value for a in own if isinstance(a, ast.Assign) and isinstance(a.value, ast.Call)
                         and any(isinstance(t, ast.Name) and t.id == value.id for t in a.targets)]
                if not bound:
                    return UNKNOWN
                verdicts += [of(b) for b in bound]
            else:
                verdicts.append(of(value))
        return combine(verdicts)

    def returns_plain_instance(self, qualname: str) -> bool:
        """``qualname`` is a function of the project, or a classmethod or staticmethod of a
        project class (``DynamicNet.from_file``), whose every ``return`` gives an instance of a
        project class that derives from no nn.Module: built in the return, or bound to a name
        only such calls bind (``net = DynamicNet(...); net.add(m); return net``). Such a
        factory's result has no train/eval mode, as the class's own constructor's has none."""
        from gradfix.analysis.statements import own_nodes  # (the index alone imports no analysis)

        found = self.defining_module(qualname, None)
        func, owner = None, None
        if found is not None:
            func = top_level_definition(found[1], qualname.rpartition(".")[2])
        else:
            owner_qual, _, method = qualname.rpartition(".")
            found = self.defining_module(owner_qual, None) if owner_qual else None
            owner = top_level_definition(found[1], owner_qual.rpartition(".")[2]) if found is not None else None
            if not isinstance(owner, ast.ClassDef):
                return False
            func = next(_defines(owner, method), None)
            decorators = {d.id for d in getattr(func, "decorator_list", ()) if isinstance(d, ast.Name)}
            if not decorators & {"classmethod", "staticmethod"}:
                return False
        if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return False
        module, _, names = found
        own = own_nodes(func)

        def plain(value: ast.AST) -> bool:
            if not isinstance(value, ast.Call):
                return False
            if owner is not None and isinstance(value.func, ast.Name) and value.func.id == "cls":
                return self.is_module_class(f"{module}.{owner.name}", near=module) is False
            qual = qualify(names, value.func)
            return qual is not None and self.is_module_class(qual, near=module) is False

        returned = [n.value for n in own if isinstance(n, ast.Return)]
        if not returned:
            return False
        for value in returned:
            if isinstance(value, ast.Name):  # bound only by `name = Plain(...)` statements
                stores = [n for n in own if isinstance(n, ast.Name) and n.id == value.id and isinstance(n.ctx, ast.Store)]
                bound = [a.value for a in own if isinstance(a, ast.Assign) and any(t in stores for t in a.targets)]
                if not stores or len(bound) != len(stores) or not all(plain(b) for b in bound):
                    return False
            elif not plain(value):
                return False
        return True

    def factory_of(self, func, names: dict[str, str], index: int | None = None) -> str:
        """Verdict for what a function of this file returns (element ``index`` of its tuple)."""
        return self._factory(self.module, func, names, 1, index)


def _defines(cls: ast.ClassDef, name: str):
    """The methods named ``name`` in the body of ``cls``."""
    return (m for m in cls.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)) and m.name == name)


def _is_self_attr(node: ast.AST, attr: str) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == attr and isinstance(node.value, ast.Name) and node.value.id == "self"


def _runs(func, node: ast.Attribute) -> bool:
    """``self.attr`` is run in ``func``: called (``self.attr(x)``, ``self.attr[i](x)``), a
    method of it called (``self.encoder.encode(x)``) or iterated (``for layer in self.attr:``);
    a read of a number (``self.num_layers``) runs nothing."""
    for parent in ast.walk(func):
        if isinstance(parent, ast.Call) and (
            parent.func is node or isinstance(parent.func, (ast.Subscript, ast.Attribute)) and parent.func.value is node
        ):
            return True
        if isinstance(parent, (ast.For, ast.comprehension)) and parent.iter is node:
            return True
        if isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name) and parent.func.id in ("zip", "enumerate") and node in parent.args:
            return True
    return False


def _building_calls(cls: ast.ClassDef) -> list[ast.Call]:
    """Calls that build the class's layers: in ``__init__`` and in the methods it calls on
    ``self`` (``self._make_layer(...)``)."""
    methods = {m.name: m for m in cls.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))}
    todo, seen, calls = ["__init__"], set(), []
    while todo:
        name = todo.pop()
        if name in seen or name not in methods:
            continue
        seen.add(name)
        for node in ast.walk(methods[name]):
            if isinstance(node, ast.Call):
                calls.append(node)
                f = node.func
                if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "self":
                    todo.append(f.attr)
    # Class-level layers (`block = nn.Sequential(...)` in the body) too.
    calls += [n for s in cls.body if not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) for n in ast.walk(s) if isinstance(n, ast.Call)]
    return calls


#: ``nn.Module`` methods that return the module itself (pinned in tests/facts/test_gf302_facts.py):
#: ``model.to(device)``, ``model.cuda()``, ``model.eval()`` are still ``model``. Defined here, not
#: in vocabulary.py (which re-exports it), so that a warm cached run imports no gradfix.facts.
MODULE_RETURNS_SELF = frozenset(
    {"to", "cuda", "cpu", "float", "double", "half", "bfloat16", "eval", "train", "requires_grad_", "share_memory"}
)
# `.eval()` is left on: what a binding's `.eval()` means is module_mode's question (`_eval_chain`).
_MOVES = MODULE_RETURNS_SELF - {"eval"}


def strip_moves(value: ast.AST) -> ast.AST:
    """``Net(...).to(device).float()`` -> ``Net(...)`` (these return the module itself)."""
    while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr in _MOVES:
        value = value.func.value
    return value


def top_level_definition(tree: ast.Module, name: str) -> ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The first class or def named ``name`` at the top of ``tree``."""
    return next(
        (s for s in tree.body if isinstance(s, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and s.name == name),
        None,
    )
