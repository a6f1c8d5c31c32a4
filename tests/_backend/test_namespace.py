"""kernelkit's namespace helpers agree with array_api_compat on every input kind."""

from __future__ import annotations

import array_api_compat
import numpy as np
import pytest

from kernelkit._backend import namespace as ns

torch = pytest.importorskip("torch")


def _inputs():
    return [
        (np.zeros(3),),
        (np.zeros((2, 2)), np.ones(2)),
        (np.float64(1.0),),  # a NumPy scalar: through array_api_compat
        (np.ma.masked_array([1.0]),),  # an ndarray subclass
        (torch.zeros(2),),
        (torch.zeros(2, dtype=torch.float64), torch.ones(1)),
        (torch.nn.Parameter(torch.zeros(2)),),
    ]


@pytest.mark.parametrize("arrays", _inputs(), ids=range(len(_inputs())))
def test_array_namespace_and_device_agree(arrays):
    xp = ns.array_namespace(*arrays)
    assert xp is array_api_compat.array_namespace(*arrays)
    assert ns.is_numpy_namespace(xp) == array_api_compat.is_numpy_namespace(xp)
    assert ns.is_torch_namespace(xp) == array_api_compat.is_torch_namespace(xp)
    for a in arrays:
        assert ns.device(a) == array_api_compat.device(a)
        assert ns.is_torch_array(a) == array_api_compat.is_torch_array(a)


def test_mixed_namespaces_still_raise():
    with pytest.raises(TypeError):
        ns.array_namespace(np.zeros(2), torch.zeros(2))


def test_plain_modules_are_recognised():
    assert ns.is_numpy_namespace(np) and not ns.is_torch_namespace(np)
    assert ns.is_torch_namespace(torch) and not ns.is_numpy_namespace(torch)


def test_numpy_users_do_not_import_torch():
    import subprocess
    import sys

    code = (
        "import sys, numpy as np; from kernelkit._backend import namespace as ns; "
        "xp = ns.array_namespace(np.zeros(2)); ns.is_torch_namespace(xp); ns.device(np.zeros(1)); "
        "ns.is_torch_array(np.zeros(1)); print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
