"""The benchmark networks: each a named, versioned recipe that builds a torch module with random weights.

Latency does not depend on weight values, so nothing is downloaded: every model is built from a config.
A recipe's ``version`` changes whenever what it builds changes (architecture, input shape, precision of
the IR), so results recorded with one version are never silently compared with another.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from typing import TYPE_CHECKING

from placement_gym.errors import UnknownNameError

if TYPE_CHECKING:  # torch takes seconds to import: only building a model needs it
    import torch
    from torch import nn


@dataclass(frozen=True)
class ModelSpec:
    """How to build one benchmark network.

    Attributes:
        name: Stable name, used in env IDs (``DevicePlacement-<name>-v0``).
        version: Version of the graph this recipe builds (bumped on any change to ``build``/``inputs``).
        description: One line for listings.
        build: Returns the torch module (eval mode, random weights, seeded).
        inputs: Example inputs, name -> tensor, with the static shapes the IR is converted with.
        config: The architecture settings, recorded with the cached IR.
    """

    name: str
    version: int
    description: str
    build: Callable[[], nn.Module]
    inputs: Callable[[], dict[str, torch.Tensor]]
    config: dict[str, Any] = field(default_factory=dict)


def _seeded(fn: Callable[[], nn.Module]) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        from placement_gym.zoo.torch_modules import seeded

        return seeded(fn)

    return build


def _image(size: int) -> Callable[[], dict[str, torch.Tensor]]:
    def inputs() -> dict[str, torch.Tensor]:
        import torch

        return {"pixel_values": torch.zeros(1, 3, size, size)}

    return inputs


def _tokens(seq_len: int) -> Callable[[], dict[str, torch.Tensor]]:
    def inputs() -> dict[str, torch.Tensor]:
        import torch

        return {
            "input_ids": torch.ones(1, seq_len, dtype=torch.int64),
            "attention_mask": torch.ones(1, seq_len, dtype=torch.int64),
            "token_type_ids": torch.zeros(1, seq_len, dtype=torch.int64),
        }

    return inputs


def _audio(mel_bins: int, frames: int) -> Callable[[], dict[str, torch.Tensor]]:
    def inputs() -> dict[str, torch.Tensor]:
        import torch

        return {"input_features": torch.zeros(1, mel_bins, frames)}

    return inputs


_BERT_BASE = dict(
    hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072, vocab_size=30522
)
_BERT_TINY = dict(
    hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, vocab_size=128
)


def _bert(cfg: dict[str, Any]) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        from transformers import BertConfig, BertModel

        from placement_gym.zoo.torch_modules import TokensToHidden

        config = BertConfig(**cfg, attn_implementation="eager")
        return TokensToHidden(BertModel(config, add_pooling_layer=True))

    return build


def _resnet50() -> nn.Module:
    from transformers import ResNetConfig, ResNetForImageClassification

    from placement_gym.zoo.torch_modules import ImageInput

    config = ResNetConfig(
        embedding_size=64,
        hidden_sizes=[256, 512, 1024, 2048],
        depths=[3, 4, 6, 3],
        layer_type="bottleneck",
        num_labels=1000,
    )
    return ImageInput(ResNetForImageClassification(config))


_VIT_B16 = dict(
    image_size=224, patch_size=16, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
    intermediate_size=3072, num_labels=1000,
)  # fmt: skip
_VIT_TINY = dict(
    image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
    intermediate_size=64, num_labels=10,
)  # fmt: skip
_CONVNEXT_T = dict(depths=[3, 3, 9, 3], hidden_sizes=[96, 192, 384, 768], num_labels=1000)
_CONVNEXT_TINY = dict(depths=[1, 1, 2, 1], hidden_sizes=[8, 16, 32, 64], num_labels=10)


def _vit(cfg: dict[str, Any]) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        from transformers import ViTConfig, ViTForImageClassification

        from placement_gym.zoo.torch_modules import ImageInput

        config = ViTConfig(**cfg, attn_implementation="eager")
        return ImageInput(ViTForImageClassification(config))

    return build


def _convnext(cfg: dict[str, Any]) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        from transformers import ConvNextConfig, ConvNextForImageClassification

        from placement_gym.zoo.torch_modules import ImageInput

        return ImageInput(ConvNextForImageClassification(ConvNextConfig(**cfg)))

    return build


_GPT2_SMALL = dict(n_layer=12, n_embd=768, n_head=12, vocab_size=50257, n_positions=1024)


def _gpt2(cfg: dict[str, Any]) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        from transformers import GPT2Config, GPT2Model

        from placement_gym.zoo.torch_modules import TokensToHidden

        config = GPT2Config(**cfg, attn_implementation="eager", use_cache=False)  # no KV cache: a static graph
        # BERT's three inputs; GPT-2 embeds token_type_ids with its token table (one lookup more)
        return TokensToHidden(GPT2Model(config))

    return build


_SWIN_T = dict(
    image_size=224, patch_size=4, embed_dim=96, depths=[2, 2, 6, 2], num_heads=[3, 6, 12, 24], window_size=7,
    num_labels=1000,
)  # fmt: skip
_MOBILEVIT_S = dict(
    image_size=256, hidden_sizes=[144, 192, 240], neck_hidden_sizes=[16, 32, 64, 96, 128, 160, 640],
    num_labels=1000,
)  # fmt: skip


def _swin(cfg: dict[str, Any]) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        from transformers import SwinConfig, SwinForImageClassification

        from placement_gym.zoo.torch_modules import ImageInput

        return ImageInput(SwinForImageClassification(SwinConfig(**cfg, attn_implementation="eager")))

    return build


def _mobilevit(cfg: dict[str, Any]) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        from transformers import MobileViTConfig, MobileViTForImageClassification

        from placement_gym.zoo.torch_modules import ImageInput

        return ImageInput(MobileViTForImageClassification(MobileViTConfig(**cfg, attn_implementation="eager")))

    return build


_WHISPER_TINY = dict(
    d_model=384, encoder_layers=4, encoder_attention_heads=6, encoder_ffn_dim=1536, num_mel_bins=80,
    max_source_positions=1500,
)  # fmt: skip


def _whisper_encoder(cfg: dict[str, Any]) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        from transformers import WhisperConfig
        from transformers.models.whisper.modeling_whisper import WhisperEncoder

        from placement_gym.zoo.torch_modules import AudioEncoder

        return AudioEncoder(WhisperEncoder(WhisperConfig(**cfg, attn_implementation="eager")))

    return build


def _mobilenet_v2() -> nn.Module:
    from transformers import MobileNetV2Config, MobileNetV2ForImageClassification

    from placement_gym.zoo.torch_modules import ImageInput

    return ImageInput(MobileNetV2ForImageClassification(MobileNetV2Config(num_labels=1000)))


def _efficientnet_b0() -> nn.Module:
    import torch
    from transformers import EfficientNetConfig, EfficientNetForImageClassification

    from placement_gym.zoo.torch_modules import ImageInput

    config = EfficientNetConfig(
        width_coefficient=1.0, depth_coefficient=1.0, image_size=224, hidden_dim=1280, num_labels=1000
    )  # the B0 scaling (the config's defaults are B7's)
    model = EfficientNetForImageClassification(config)
    # transformers pools with AvgPool2d(kernel=hidden_dim, ceil_mode=True): a global mean that OpenVINO's
    # shape inference rejects (kernel 1280 > 7x7 map); the same mean, as OpenVINO reads it:
    model.efficientnet.pooler = torch.nn.AdaptiveAvgPool2d(1)
    return ImageInput(model)


def _inception_v3() -> nn.Module:
    from placement_gym.zoo.inception_v3 import InceptionV3

    from placement_gym.zoo.torch_modules import ImageInput

    return ImageInput(InceptionV3())


def _tiny_cnn() -> nn.Module:
    from placement_gym.zoo.torch_modules import TinyBranchyCNN

    return TinyBranchyCNN()


MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in [
        ModelSpec(
            "inception_v3",
            1,
            "Inception-V3, 299x299, batch 1 (CVPR 2016)",
            _seeded(_inception_v3),
            _image(299),
            {"input": [1, 3, 299, 299], "aux_logits": False, "num_classes": 1000},
        ),
        ModelSpec(
            "resnet50",
            1,
            "ResNet-50 (transformers ResNetForImageClassification), 224x224, batch 1",
            _seeded(_resnet50),
            _image(224),
            {"input": [1, 3, 224, 224], "num_classes": 1000},
        ),
        ModelSpec(
            "bert",
            1,
            "BERT-base encoder with pooler, sequence length 128, batch 1",
            _seeded(_bert(_BERT_BASE)),
            _tokens(128),
            {**_BERT_BASE, "seq_len": 128, "attn": "eager"},
        ),
        ModelSpec(
            "vit_b16",
            1,
            "ViT-B/16 (transformers ViTForImageClassification), 224x224, batch 1 (held out)",
            _seeded(_vit(_VIT_B16)),
            _image(224),
            {**_VIT_B16, "input": [1, 3, 224, 224], "attn": "eager"},
        ),
        ModelSpec(
            "convnext_t",
            1,
            "ConvNeXt-T (transformers ConvNextForImageClassification), 224x224, batch 1 (held out)",
            _seeded(_convnext(_CONVNEXT_T)),
            _image(224),
            {**_CONVNEXT_T, "input": [1, 3, 224, 224]},
        ),
        ModelSpec(
            "swin_t",
            1,
            "Swin-T (transformers SwinForImageClassification), 224x224, windows of 7, batch 1 (held out)",
            _seeded(_swin(_SWIN_T)),
            _image(224),
            {**_SWIN_T, "input": [1, 3, 224, 224], "attn": "eager"},
        ),
        ModelSpec(
            "mobilevit_s",
            1,
            "MobileViT-S (transformers MobileViTForImageClassification), 256x256, batch 1 (held out)",
            _seeded(_mobilevit(_MOBILEVIT_S)),
            _image(256),
            {**_MOBILEVIT_S, "input": [1, 3, 256, 256], "attn": "eager"},
        ),
        ModelSpec(
            "whisper_tiny",
            1,
            "Whisper-tiny audio encoder (transformers WhisperEncoder), 80 mel bins x 3000 frames, batch 1 "
            "(held out)",
            _seeded(_whisper_encoder(_WHISPER_TINY)),
            _audio(80, 3000),
            {**_WHISPER_TINY, "input": [1, 80, 3000], "attn": "eager"},
        ),
        ModelSpec(
            "mobilenet_v2",
            1,
            "MobileNet-V2 (transformers), 224x224, batch 1 (pretraining only)",
            _seeded(_mobilenet_v2),
            _image(224),
            {"input": [1, 3, 224, 224], "num_labels": 1000},
        ),
        ModelSpec(
            "efficientnet_b0",
            1,
            "EfficientNet-B0 (transformers), 224x224, batch 1 (pretraining only)",
            _seeded(_efficientnet_b0),
            _image(224),
            {"input": [1, 3, 224, 224], "width": 1.0, "depth": 1.0, "num_labels": 1000},
        ),
        ModelSpec(
            "gpt2",
            1,
            "GPT-2 small decoder (no KV cache), sequence length 128, batch 1 (pretraining only)",
            _seeded(_gpt2(_GPT2_SMALL)),
            _tokens(128),
            {**_GPT2_SMALL, "seq_len": 128, "attn": "eager"},
        ),
        ModelSpec(
            "tiny_bert",
            1,
            "2-layer BERT, hidden 32, sequence length 16 (tests)",
            _seeded(_bert(_BERT_TINY)),
            _tokens(16),
            {**_BERT_TINY, "seq_len": 16, "attn": "eager"},
        ),
        ModelSpec(
            "tiny_cnn",
            1,
            "tiny CNN with two parallel branches, 16x16 (tests)",
            _seeded(_tiny_cnn),
            _image(16),
            {"input": [1, 3, 16, 16]},
        ),
        ModelSpec(
            "tiny_vit",
            1,
            "2-layer ViT, hidden 32, 32x32 image in 8x8 patches (tests)",
            _seeded(_vit(_VIT_TINY)),
            _image(32),
            {**_VIT_TINY, "input": [1, 3, 32, 32], "attn": "eager"},
        ),
        ModelSpec(
            "tiny_convnext",
            1,
            "ConvNeXt with stages of 1-2 blocks, widths 8-64, 32x32 (tests)",
            _seeded(_convnext(_CONVNEXT_TINY)),
            _image(32),
            {**_CONVNEXT_TINY, "input": [1, 3, 32, 32]},
        ),
    ]
}

#: The models the paper-style benchmarks use.
BENCHMARK_MODELS = ("inception_v3", "resnet50", "bert")
#: Model families kept out of training, for zero-shot transfer tests (issue #11): never train on them.
HELD_OUT_MODELS = ("vit_b16", "convnext_t", "swin_t", "mobilevit_s", "whisper_tiny")
#: Further families for pretraining learned methods only: never in a benchmark table or the suite.
PRETRAIN_MODELS = ("mobilenet_v2", "efficientnet_b0", "gpt2")


def get_spec(name: str) -> ModelSpec:
    """The recipe registered under ``name``.

    Raises:
        UnknownNameError: If no model of that name exists (the message lists the known ones).
    """
    try:
        return MODELS[name]
    except KeyError:
        raise UnknownNameError("model", name, MODELS) from None


def __getattr__(name: str):
    # the test model's torch class, importable from here as before, without importing torch up front
    if name == "TinyBranchyCNN":
        from placement_gym.zoo.torch_modules import TinyBranchyCNN

        return TinyBranchyCNN
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
