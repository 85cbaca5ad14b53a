"""The gradient compressors are measured on (``measure/profile.py``): every trained
parameter's, flat in model order, and a parameter backward left without one is named."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from gradsync.measure.profile import MeasurementError, _flat_gradient


def test_the_gradient_is_a_copy_of_every_parameter_s_end_to_end():
    params = [nn.Parameter(torch.zeros(2, 2)), nn.Parameter(torch.zeros(3))]
    params[0].grad, params[1].grad = torch.ones(2, 2), torch.full((3,), 2.0)
    gradient = _flat_gradient(list(params))
    params[1].grad.zero_()
    assert gradient.tolist() == [1.0] * 4 + [2.0] * 3


def test_a_parameter_backward_did_not_reach_is_named_by_its_shape():
    params = [nn.Parameter(torch.zeros(2)), nn.Parameter(torch.zeros(3))]
    params[0].grad = torch.ones(2)
    with pytest.raises(MeasurementError, match=r"shape \(3,\) got no gradient"):
        _flat_gradient(list(params))
