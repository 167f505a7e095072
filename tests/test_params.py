"""tostnp.nn.params: one checker for every layer's parameter dict (missing, unknown, misshaped,
wrong dtype: one line naming the key), and the dotted-key helpers."""
import numpy as np
import pytest

from tostnp.nn import layers as L
from tostnp.nn import attention as A
from tostnp.nn import class_attention as CA
from tostnp.nn.tssa import tssa_forward
from tostnp.nn.block import tost_block_forward
from tostnp.nn.params import check_params, sub, prefixed, num_params

SPEC = {"W": ((3, "H"), True), "b": (("H",), False)}


def test_check_params_messages():
    W, b = np.zeros((3, 4)), np.zeros(4)
    check_params({"W": W, "b": b}, SPEC, np.float64)
    check_params({"W": W}, SPEC, np.float64)                       # optional key absent
    with pytest.raises(ValueError, match=r"lin: params is missing key 'W' of shape \(3, H\)"):
        check_params({"b": b}, SPEC, np.float64, "lin")
    with pytest.raises(ValueError, match=r"unknown key 'B'; expected keys \['W', 'b'\]"):
        check_params({"W": W, "B": b}, SPEC, np.float64)
    with pytest.raises(ValueError, match=r"params\['W'\] must have shape \(3, H\), got \(4, 3\)"):
        check_params({"W": W.T}, SPEC, np.float64)
    with pytest.raises(TypeError, match=r"params\['W'\] has dtype float32"):
        check_params({"W": W.astype(np.float32)}, SPEC, np.float64)
    with pytest.raises(TypeError, match="params must be a dict"):
        check_params([W], SPEC, np.float64)


@pytest.mark.parametrize("call", [
    lambda P: L.mlp_forward(np.zeros((2, 4)), P["mlp"]),
    lambda P: A.softmax_attention_forward(np.zeros((1, 3, 4)), P["qkv"], 2),
    lambda P: A.linear_attention_forward(np.zeros((1, 3, 4)), P["qkv"], 2),
    lambda P: CA.class_attention_forward(np.zeros((1, 3, 4)), P["cls"], 2),
    lambda P: tssa_forward(np.zeros((1, 3, 4)), P["tssa"], 2),
    lambda P: tost_block_forward(np.zeros((1, 3, 4)), P["block"], 2),
], ids=["mlp", "softmax", "linear", "class", "tssa", "block"])
def test_every_layer_rejects_an_unknown_key(call):
    z = np.zeros
    P = {"mlp": {"W1": z((4, 8)), "W2": z((8, 4))},
         "qkv": {"W_qkv": z((4, 12)), "W_o": z((4, 4))},
         "cls": {"W_q": z((4, 4)), "W_kv": z((4, 8)), "W_o": z((4, 4))},
         "tssa": {"W_u": z((4, 4)), "temp": np.ones((2, 1)), "W_o": z((4, 4))}}
    P["block"] = {"ln1.gamma": z(4), "ln1.beta": z(4), "ls1.gamma": z(4), "ln2.gamma": z(4),
                  "ln2.beta": z(4), "ls2.gamma": z(4), **prefixed(P["tssa"], "tssa"),
                  **prefixed(P["mlp"], "mlp")}
    call(P)                                                        # the exact set is accepted
    for name in P:
        P[name] = {**P[name], "W_typo": z((4, 4))}
    with pytest.raises(ValueError, match="unknown key 'W_typo'"):
        call(P)


def test_sub_prefixed_num_params():
    P = {"a.x": np.zeros((2, 3)), "a.y": np.zeros(4), "b.x": np.zeros(1)}
    assert set(sub(P, "a")) == {"x", "y"} and sub(P, "a")["x"] is P["a.x"]
    assert prefixed(sub(P, "a"), "a").keys() == {"a.x", "a.y"}
    assert num_params(P) == 11
