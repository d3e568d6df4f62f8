# WinoGrande's partial scoring is lm-eval's own code: the functions of the installed package
# (lm_eval/tasks/winogrande/preprocess_winogrande.py), re-exported for this task's `!function` lines.
from lm_eval.tasks.winogrande.preprocess_winogrande import doc_to_choice, doc_to_target, doc_to_text  # noqa: F401
