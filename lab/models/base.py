"""What every lab model declares to the tasks and the run-time."""
from __future__ import annotations

from torch import nn

from lab.nn import Role, TransformerConfig
from lab.nn.mup import Scale, parameter_scales, rescale_init


class LabModel(nn.Module):
    """A model built from lab.nn. cfg: its architecture. init_from: where pretrained weights come from (a Hugging
    Face directory, or a lab checkpoint for the classifier), loaded by the task when training starts; None: none.
    forward(..., return_aux=True) returns (output, lab.nn.Aux): the routed layers' losses and statistics."""

    cfg: TransformerConfig
    init_from: str | None = None

    def parameter_roles(self) -> dict[str, Role]:
        """Parameter name (a tied tensor under its first name) -> Role: lab.nn.parameter_roles with this
        model's output layers."""
        raise NotImplementedError

    def parameter_scales(self) -> dict[str, Scale]:
        """Parameter name (as in parameter_roles) -> its model.parametrization factors on init std and Adam lr
        (lab.nn.mup; all 1 under sp)."""
        return parameter_scales(self, self.cfg, self.parameter_roles())

    def apply_parametrization(self) -> None:
        """A model's last step of construction, after sp's init and tying: model.parametrization's init
        (lab.nn.mup.rescale_init; nothing under sp)."""
        rescale_init(self, self.cfg, self.parameter_roles())
