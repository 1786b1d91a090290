"""Mask updates on a PyTorch model's SparseLinear layers, with its torch optimizer.

    updater = coppice.torch.MaskUpdater(model, opt, method="rigl", end_step=6300, interval=100, drop_fraction=0.3)
    for step, (x, y) in enumerate(batches):
        updater.begin_step(step)             # arms the dense-gradient capture on RigL's update steps
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(); loss.backward(); opt.step()
        updater.step(step)                   # on update steps: drop, regrow, carry the optimizer's state over

The selection is Coppice's own (coppice.optim.PatternUpdater: SET, RigL, SNFS, on BSR whole blocks, on n:m
weights regrowth within each group, the trainer's rigl_nm), run on the layers' device. A changed layer keeps
its nn.Parameter object (the optimizer's reference stays good): survivors keep their values bit for bit,
grown entries start at zero, and every tensor of the optimizer's state for the values (SGD's momentum_buffer,
Adam's exp_avg and exp_avg_sq, ...) is remapped entry by entry the same way (a grown entry's state is zero).
GradualMagnitudePruning does the same for GMP's schedule (only removing entries). Under torch.distributed
(DistributedDataParallel), RigL's dense gradients are averaged over the ranks before the selection, so every
replica picks the same masks (give every rank the same seed for random growth). An update that changes a layer's
number of stored entries (SNFS, GMP) needs the DDP wrapper built again (docs/guide/pytorch.md), and warns so.
"""
import torch

import coppice

from ._exchange import to_coppice, to_torch
from .modules import SparseLinear

# Each method's growth policy (coppice.growth_policies() lists every registered one).
GROWTH = {"set": "random", "rigl": "gradient", "snfs": "momentum"}


def sparse_layers(model, names=None):
    """{name: SparseLinear} of the model, all of them or those named."""
    layers = {n: m for n, m in model.named_modules() if isinstance(m, SparseLinear)}
    if names is not None:
        unknown = [n for n in names if n not in layers]
        if unknown:
            raise ValueError(f"coppice.torch: {unknown} name no SparseLinear of the model; it has {sorted(layers)}")
        layers = {n: layers[n] for n in names}
    if not layers:
        raise ValueError("coppice.torch: the model has no SparseLinear layer (coppice.torch.sparsify_ makes them)")
    return layers


def adopt_pattern(layer, optimizer, weight, keep_from):
    """layer takes the sparse coppice.Tensor `weight`; every tensor of the optimizer's state for layer.values of
    the values' old shape is remapped by keep_from (each new slot's old slot, -1: new, so zero)."""
    old_shape = layer.values.shape
    keep = to_torch(keep_from).to(layer.values.device).reshape(-1)
    kept = keep >= 0
    source = keep[kept]
    state = optimizer.state.get(layer.values) if optimizer is not None else None
    layer.set_pattern(weight)  # clears the old pattern's gradient too
    if not state:
        return
    for key, value in list(state.items()):
        if torch.is_tensor(value) and value.shape == old_shape:
            flat = value.reshape(-1)
            moved = torch.zeros(keep.numel(), dtype=value.dtype, device=value.device)
            moved[kept] = flat[source]
            state[key] = moved.reshape(layer.values.shape)


def _averaged_over_ranks(gradient):
    """Under torch.distributed (DDP), the mean of every rank's dense gradient, so that every replica ranks the
    same signal and picks the same masks (DDP averages the compact gradients the same way)."""
    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return gradient
    gradient = gradient.clone()
    dist.all_reduce(gradient)
    return gradient.div_(dist.get_world_size())


def _state_to_torch(state):
    return {k: to_torch(v) if isinstance(v, coppice.Tensor) else v for k, v in state.items()}


class MaskUpdater:
    """Prune and regrow (SET, RigL, SNFS, block RigL on BSR layers, rigl_nm on n:m layers) over a torch model's
    SparseLinear layers. method picks the growth policy (set: random, rigl: gradient, snfs: momentum); growth=
    names any registered policy instead (a Python one from coppice.register_growth_policy included). The other
    keywords are the trainer's mask_update keys."""

    def __init__(self, model, optimizer, *, end_step, method="rigl", interval=100, drop_fraction=0.3,
                 drop_schedule="cosine", prune="magnitude", growth=None, start_step=0, seed=0,
                 allow_regrow_dropped=False, layers=None):
        if growth is None:
            if method not in GROWTH:
                raise ValueError(f"MaskUpdater: method must be one of {', '.join(GROWTH)}, got {method!r} "
                                 "(or pass growth= a registered policy)")
            growth = GROWTH[method]
        self.layers = sparse_layers(model, layers)
        self.optimizer = optimizer
        self.updater = coppice.optim.PatternUpdater(
            end_step=end_step, interval=interval, drop_fraction=drop_fraction, growth=growth, prune=prune,
            start_step=start_step, drop_schedule=drop_schedule, allow_regrow_dropped=allow_regrow_dropped, seed=seed)
        for name, layer in self.layers.items():
            self.updater.add_layer(name, layer.sparse_weight())
        self._gradients = {}
        self._armed = None

    def begin_step(self, step):
        """Before the step's backward pass: on an update step whose growth ranks the dense gradient, each layer's
        backward also forms dy^T x [out, in] (only then: on other steps gradients stay compact), summed over the
        step's backward passes until step() (gradient accumulation) as the compact gradient is."""
        self._gradients.clear()
        self._armed = step if self.updater.needs_dense_gradient(step) else None
        for name, layer in self.layers.items():
            layer._dense_grad_sink = (lambda g, name=name: self._add_gradient(name, g)) \
                if self._armed is not None else None

    def _add_gradient(self, name, g):
        # Summed, as the compact gradient is: every backward pass of the step (gradient accumulation over
        # micro-batches) and every use of the layer in one forward adds its part.
        if name in self._gradients:
            self._gradients[name] = self._gradients[name] + g
        else:
            self._gradients[name] = g

    def step(self, step):
        """After optimizer.step(): on update steps, each layer's new pattern (the same nn.Parameter, the
        optimizer's state remapped); returns PatternUpdater.update's report, or None on other steps."""
        if not self.updater.is_update_step(step):
            self._disarm()
            return None
        needs_gradient = self.updater.needs_dense_gradient(step)
        needs_momentum = self.updater.needs_momentum(step)
        inputs = {}
        for name, layer in self.layers.items():
            entry = {"param": layer.sparse_weight()}
            if needs_gradient:
                if self._armed != step or name not in self._gradients:
                    raise RuntimeError(f"MaskUpdater.step({step}): growth ranks the dense gradient of {name!r}, which "
                                       f"was not captured: call begin_step({step}) before the backward pass")
                entry["gradient"] = to_coppice(_averaged_over_ranks(self._gradients[name]).contiguous())
            if needs_momentum:
                entry["momentum"] = self._dense_momentum(name, layer)
            inputs[name] = entry
        report = self.updater.update(step, inputs)
        for name, r in report["layers"].items():
            if r["changed"]:
                adopt_pattern(self.layers[name], self.optimizer, r["param"], r["keep_from"])
        self._disarm()
        return report

    def _dense_momentum(self, name, layer):
        state = self.optimizer.state.get(layer.values, {})
        buffer = state.get("momentum_buffer", state.get("exp_avg"))
        if buffer is None:
            raise RuntimeError(f"MaskUpdater: growth by momentum (SNFS) needs the optimizer's momentum for {name!r} "
                               "(SGD with momentum, or Adam's exp_avg); it has none yet")
        return coppice.kernels.with_values(layer.pattern(), to_coppice(buffer)).to_dense()

    def _disarm(self):
        for layer in self.layers.values():
            layer._dense_grad_sink = None
        self._gradients.clear()
        self._armed = None

    def is_update_step(self, step):
        return self.updater.is_update_step(step)

    def itop_rate(self, name):
        return self.updater.itop_rate(name)

    def state_dict(self):
        """The updater's own state (the ITOP record, movement scores) as torch tensors; the masks are the
        layers' buffers, in the model's state_dict."""
        return _state_to_torch(self.updater.state_dict())

    def load_state_dict(self, state_dict):
        self.updater.load_state_dict({k: to_coppice(v) if torch.is_tensor(v) else v for k, v in state_dict.items()},
                                     {n: layer.sparse_weight() for n, layer in self.layers.items()})


class GradualMagnitudePruning:
    """GMP (Zhu and Gupta 2017) on a torch model's SparseLinear layers: on each prune step, every layer keeps its
    largest entries (BSR: blocks) down to the cubic schedule's density; the optimizer's state follows. Start
    the layers dense in format (sparsify_ at density 1.0) or at initial_density."""

    def __init__(self, model, optimizer, *, end_step, start_step=0, frequency=100, initial_density=1.0,
                 final_density=0.1, layers=None):
        self.layers = sparse_layers(model, layers)
        self.optimizer = optimizer
        self.pruner = coppice.optim.GmpPruner(end_step=end_step, start_step=start_step, frequency=frequency,
                                              initial_density=initial_density, final_density=final_density)

    def step(self, step):
        """After optimizer.step(): prunes on prune steps; returns {layer: density after} when it pruned."""
        if not self.pruner.is_prune_step(step):
            return None
        out = {}
        for name, layer in self.layers.items():
            weight, keep_from = self.pruner.prune(step, layer.sparse_weight())
            if keep_from is not None:
                adopt_pattern(layer, self.optimizer, weight, keep_from)
            out[name] = layer.density
        return out

    def density_at(self, step):
        return self.pruner.density_at(step)

    def state_dict(self):
        return {}  # the schedule is the constructor's; the masks are the layers' buffers

    def load_state_dict(self, state_dict):
        if state_dict:
            raise ValueError(f"GradualMagnitudePruning.load_state_dict: expected {{}}, got keys {sorted(state_dict)}")
