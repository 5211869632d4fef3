"""Kaggle glue: the competition run (all GPUs, inside the time limit, always a submission) and the dataset build.

``competition`` runs the hidden test set on Kaggle; ``dataset_build`` and ``wheelhouse`` make the
offline dataset (model, kit wheel, the wheels the image lacks); ``model_input`` finds a Kaggle Model
attached to the notebook; ``local_check`` runs a built dataset's notebook here as Kaggle would, in an
environment of the image's versions (``image_environment``). It may import ``run`` and below.
"""

from arc_kit.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "competition": ("run_competition",),
    "dataset_build": ("build_dataset",),
})
