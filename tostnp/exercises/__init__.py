"""Checkers for the exercise notebooks (``exercises/NN_*.md``), one ``check_<name>`` per
exercise: ``check_<name>(student_fn)`` or ``check_<name>(result)``.

Each compares the student's answer with an independent reference (autograd, loops, eigenvalues,
finite differences) on several inputs, including edge shapes; prints ``PASS`` or raises
``AssertionError`` with a hint computed from the error (a constant factor, an axis, a sign, a
transpose, float32 precision, a shape). In a notebook, calling the ``tostnp`` function under
study instead of writing it raises ``AssertionError`` too. Each exercise earns a score (the
fraction of cases passed, times its points). One module per notebook (``exNN_<notebook>.py``).

``exercises check`` and ``exercises grade`` run a notebook's cells in a separate process without
the code under study and call these same checkers from outside it (:mod:`.grading`).
"""
from ._core import Delegated, Fail, NotWritten, HIDDEN_ENV, RESULTS_ENV, hints_without_traceback
from .ex01_attention_cost import check_softmax_attention, check_loglog_slope, check_attention_scaling
from .ex02_coding_rate import (check_coding_rate, check_compression, check_coding_rate_grad,
                               check_max_rate_design)
from .ex03_white_box import check_mssa, check_series_error
from .ex04_variational import (check_variational_compression, check_tight_basis,
                               check_bound_counterexample)
from .ex05_gradient_tssa import check_variational_compression_grad, check_membership, check_tssa_step
from .ex06_tssa_layer import check_tssa_memberships, check_tssa_forward
from .ex07_backprop_tssa import (check_numerical_gradient, check_softmax_heads_backward,
                                 check_token_norm_backward, check_tssa_backward)
from .ex08_tost_block import check_layer_norm, check_layer_norm_backward, check_tost_block
from .ex09_images import (check_patchify, check_adam_step, check_digits_training,
                          check_membership_maps, digits_config)
from .ex10_causal_language import check_prefix_statistics, check_causal_tssa_forward, check_decode_step
from .ex11_gpu import check_xp_coding_rate, check_xp_softmax

__all__ = [n for n in dir() if n.startswith("check_")] + [
    "digits_config", "Delegated", "Fail", "NotWritten", "HIDDEN_ENV", "RESULTS_ENV"]

hints_without_traceback()
