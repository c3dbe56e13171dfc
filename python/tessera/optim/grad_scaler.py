"""Dynamic loss scaling for fp16 mixed precision, with torch.cuda.amp.GradScaler's methods.

    scaler = tessera.optim.GradScaler()
    with tessera.autocast(tessera.float16):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)      # unscales; skips the step if a gradient is inf or NaN
    scaler.update()             # halves the scale after a skipped step, doubles it every growth_interval

The state machine is tessera's C++ one (optim/grad_scaler.h), which `tessera train` uses with
train.precision = "fp16". Under DDP every replica holds the same averaged gradients, so each decides
alike; where gradients are split across ranks (ZeRO), pass the group: the ranks then agree through
one all-reduce of the overflow flag.
"""
from .._tessera import optim as _native


class GradScaler:
    def __init__(self, init_scale=65536.0, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000,
                 process_group=None):
        self._state = _native._ScaleState(init_scale, growth_factor, backoff_factor, growth_interval)
        self._group = process_group
        self._found_inf = None  # this step's verdict, once unscaled

    def get_scale(self):
        return self._state.scale

    @property
    def skipped_steps(self):
        return self._state.skipped_steps

    def scale(self, loss):
        """The loss multiplied by the current scale: back-propagate this."""
        return loss * self._state.scale

    def unscale_(self, optimizer):
        """Divides the optimizer's gradients by the scale; remembers whether any is inf or NaN."""
        if self._found_inf is not None:
            raise RuntimeError("GradScaler.unscale_ was already called since the last update()")
        found = _native._unscale_gradients(optimizer.params, 1.0 / self._state.scale)
        if self._group is not None:
            from .. import distributed, tensor
            flag = tensor([1.0 if found else 0.0])
            distributed.all_reduce(flag, op=distributed.ReduceOp.MAX, group=self._group)
            found = flag.item() > 0
        self._found_inf = found

    def step(self, optimizer):
        """optimizer.step() unless this step's gradients overflowed. Returns whether it stepped."""
        if self._found_inf is None:
            self.unscale_(optimizer)
        if self._found_inf:
            return False
        optimizer.step()
        return True

    def update(self):
        if self._found_inf is None:
            raise RuntimeError("GradScaler.update() needs step() or unscale_() first")
        self._state.update(self._found_inf)
        self._found_inf = None

    def state_dict(self):
        return {"scale": self._state.scale, "growth_tracker": self._state.growth_tracker,
                "skipped_steps": self._state.skipped_steps}

    def load_state_dict(self, state):
        self._state.restore(state["scale"], state["growth_tracker"], state["skipped_steps"])
