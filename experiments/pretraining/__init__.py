"""Pretraining of the shipped policies, one module per method it is for
(``guided_improvement``'s move scorer, ``guided_ppo``, ``pretrained_ppo``); each writes a folder that the
method loads with ``weights=``/``policy=`` and records the command and cost of its training.
"""
