"""Checkers for the exercise notebooks (``exercises/NN_*.md``), one ``check_<name>`` per
exercise: ``check_<name>(student_fn)`` or ``check_<name>(result)``.

Each compares the student's answer with an independent reference (autograd, loops, eigenvalues,
finite differences) on several inputs, including edge shapes; prints ``PASS`` or raises
``AssertionError`` with a hint computed from the error (a constant factor, an axis, a sign, a
transpose, float32 precision, a shape). Calling the ``tostnp`` function under study instead of
writing it raises ``AssertionError`` too. Each exercise earns a score (the fraction of cases
passed, times its points); ``python -m tostnp exercises check NOTEBOOK`` prints them.
"""
from ._core import Delegated, Fail, NotWritten, HIDDEN_ENV, RESULTS_ENV
from .coding_rate import (check_coding_rate, check_compression, check_coding_rate_grad,
                          check_max_rate_design)
from .variational import (check_variational_compression, check_tight_basis,
                          check_bound_counterexample, check_variational_compression_grad,
                          check_membership, check_tssa_step)
from .tssa import (check_tssa_memberships, check_tssa_forward, check_numerical_gradient,
                   check_softmax_heads_backward, check_token_norm_backward, check_tssa_backward)
from .attention import check_softmax_attention, check_loglog_slope, check_attention_scaling
from .block import check_layer_norm, check_layer_norm_backward, check_tost_block
from .images import check_patchify, check_adam_step, check_digits_training, check_membership_maps
from .causal import check_prefix_statistics, check_causal_tssa_forward, check_decode_step
from .gpu import check_xp_coding_rate, check_xp_softmax
from .white_box import check_mssa, check_series_error

__all__ = [n for n in dir() if n.startswith("check_")] + [
    "Delegated", "Fail", "NotWritten", "HIDDEN_ENV", "RESULTS_ENV"]
