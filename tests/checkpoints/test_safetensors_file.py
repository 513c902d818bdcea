"""A damaged .safetensors file (model.init_from, lab.hf.importing.read_weights) is one line naming it, not
safetensors' SafetensorError traceback; a whole file passes."""
from __future__ import annotations

import pytest
import torch
from conftest import one_short_line
from safetensors.torch import save_file

from lab.checkpoints.safetensors_file import check_safetensors
from lab.errors import LabError
from lab.hf.importing import read_weights


@pytest.mark.parametrize(("keep", "says"), [(0, "too short"), (5, "too short"), (20, "its header alone needs"),
                                            (-1, "of the"), (-400, "of the")])
def test_a_truncated_file_is_named_with_its_size(tmp_path, keep, says):
    """keep: bytes kept (negative: cut from the end). Catches: a check of the header's length only (a file cut
    in its tensor data passes it and fails in load_file)."""
    save_file({"a": torch.arange(100.0), "b": torch.ones(3, 4)}, str(tmp_path / "model.safetensors"))
    whole = (tmp_path / "model.safetensors").read_bytes()
    check_safetensors(tmp_path / "model.safetensors")
    (tmp_path / "model.safetensors").write_bytes(whole[:keep])
    with pytest.raises(LabError) as e:
        read_weights(tmp_path)
    assert says in one_short_line(str(e.value)) and "model.safetensors" in str(e.value)
