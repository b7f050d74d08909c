"""Learned placement-improvement methods: a pretrained move scorer steering a batched improvement search
(:mod:`agents.learned.guided`)."""
