"""coppice.torch.sparsify_: a PyTorch model's nn.Linear layers made sparse in place.

    coppice.torch.sparsify_(model, [{"regex": r"blocks\\.\\d+\\.(attn|mlp)\\..*", "format": "bsr", "block": 64}],
                            density=0.1, distribution="erk")

Each rule selects modules by full name ("name") or by a regular expression
matched against the whole name ("regex"), and says how they are stored:
format (bsr, csr, csc, coo, nm; default bsr), block (bsr: an int or
(rows, cols); default 64), n and m (nm; default 2:4), and optionally a
density of its own. The first rule that selects a module applies. Layers
without a density of their own share `density` (the fraction of their
weights kept, overall) by `distribution`: uniform, er or erk, computed as the
trainer's sparsity.distribution does (coppice.layer_densities). Each
selected nn.Linear becomes a SparseLinear keeping its largest entries or
blocks (criterion "magnitude") or random ones ("random"), on its device and
dtype. A rule with "sr_ste" (format nm; True, or a dict of decay, interval
and transposable) makes SrSteLinear layers instead: a dense weight trained by
SR-STE through its n:m projection. A rule that selects nothing, or selects a
module that is not an nn.Linear, is an error.
"""
import re

import torch

import coppice

from .modules import SparseLinear, format_attributes
from .sr_ste import SrSteLinear

_RULE_KEYS = {"name", "regex", "format", "block", "n", "m", "density", "sr_ste"}


def _check_rule(i, rule):
    if not isinstance(rule, dict):
        raise TypeError(f"sparsify_: rule {i} must be a dict, got {type(rule).__name__}")
    unknown = set(rule) - _RULE_KEYS
    if unknown:
        raise ValueError(f"sparsify_: rule {i} has unknown keys {sorted(unknown)} (known: {sorted(_RULE_KEYS)})")
    if ("name" in rule) == ("regex" in rule):
        raise ValueError(f"sparsify_: rule {i} needs exactly one of 'name' and 'regex', got {rule}")
    fmt = rule.get("format", "bsr")
    format_attributes(fmt, rule.get("block", 64), rule.get("n", 2), rule.get("m", 4))  # checks the format
    sr_ste = rule.get("sr_ste")
    if sr_ste is not None and sr_ste is not False:
        if fmt != "nm":
            raise ValueError(f"sparsify_: rule {i} asks for sr_ste, which trains n:m weights: its format must be nm, "
                             f"got {fmt!r}")
        if not (sr_ste is True or (isinstance(sr_ste, dict) and set(sr_ste) <= {"decay", "interval", "transposable"})):
            raise ValueError(f"sparsify_: rule {i}'s sr_ste must be True or a dict of decay, interval and "
                             f"transposable, got {sr_ste!r}")
    if "density" in rule and not 0.0 <= float(rule["density"]) <= 1.0:
        raise ValueError(f"sparsify_: rule {i}'s density must be in [0, 1], got {rule['density']}")
    try:
        return re.compile(rule["regex"]) if "regex" in rule else None
    except re.error as e:
        raise ValueError(f"sparsify_: rule {i}'s regex {rule['regex']!r} does not compile: {e}") from None


def _selects(rule, regex, name):
    return name == rule["name"] if regex is None else regex.fullmatch(name) is not None


def sparsify_(model, rules, *, density=None, distribution="erk", criterion="magnitude", generator=None):
    """Replaces the nn.Linear modules that `rules` select with SparseLinear, in
    place; returns the model. See the module's documentation for the rules."""
    if isinstance(rules, dict):
        rules = [rules]
    compiled = [_check_rule(i, r) for i, r in enumerate(rules)]
    chosen = {}  # module name -> rule index
    for name, module in model.named_modules():
        for i, (rule, regex) in enumerate(zip(rules, compiled)):
            if _selects(rule, regex, name):
                if not isinstance(module, torch.nn.Linear):
                    raise TypeError(f"sparsify_: rule {i} selects {name!r}, a {type(module).__name__}; "
                                    "only nn.Linear modules are made sparse")
                chosen[name] = i
                break
    for i, rule in enumerate(rules):
        if i not in chosen.values():
            raise ValueError(f"sparsify_: rule {i} ({rule}) selects no module of the model")

    fixed = {}
    for name, i in chosen.items():
        rule = rules[i]
        if rule.get("format", "bsr") == "nm":
            fixed[name] = rule.get("n", 2) / rule.get("m", 4)
        elif "density" in rule:
            fixed[name] = float(rule["density"])
    shared = [name for name in chosen if name not in fixed]
    if shared and density is None:
        raise ValueError(f"sparsify_: {shared[0]!r} (rule {chosen[shared[0]]}) has no density of its own; "
                         "pass density= (the overall fraction kept) or give the rule one")
    shapes = [(name, list(model.get_submodule(name).weight.shape)) for name in chosen]
    densities = dict(coppice.layer_densities(shapes, 1.0 if density is None else float(density), distribution,
                                             overrides=fixed)) if shared else fixed

    for name, i in chosen.items():
        rule = rules[i]
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        sr_ste = rule.get("sr_ste")
        if sr_ste:
            options = sr_ste if isinstance(sr_ste, dict) else {}
            sparse = SrSteLinear.from_dense(getattr(parent, child), rule.get("n", 2), rule.get("m", 4), **options)
        else:
            sparse = SparseLinear.from_dense(getattr(parent, child), rule.get("format", "bsr"), densities[name],
                                             rule.get("block", 64), rule.get("n", 2), rule.get("m", 4), criterion,
                                             generator)
        setattr(parent, child, sparse)
    return model
