"""Real models captured with the eager backend: outputs and gradients match, graph breaks are few.

Models come from torchvision, timm and transformers when those are installed (the GPU
machine has them); otherwise the tests skip. Sizes are small so the tier stays quick.
"""

import pytest
import torch

import tensorjit


def _check(model, *args, max_graphs: int, **kwargs):
    torch.manual_seed(0)
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    compiled = tensorjit.compile(model, backend=backend)
    expected = model(*args, **kwargs)
    actual = compiled(*args, **kwargs)
    actual = compiled(*args, **kwargs)  # the cached entry
    torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-4)
    assert 1 <= len(graphs) <= max_graphs, [str(r) for r in tensorjit.explain(model)(*args, **kwargs).break_reasons]
    return compiled


TORCHVISION = ["resnet18", "mobilenet_v3_small", "densenet121", "efficientnet_b0", "vit_b_16", "squeezenet1_0"]


@pytest.mark.parametrize("name", TORCHVISION)
def test_torchvision_inference(name):
    models = pytest.importorskip("torchvision.models")
    kwargs = {"image_size": 32} if name == "vit_b_16" else {}
    model = getattr(models, name)(weights=None, num_classes=10, **kwargs).eval()
    x = torch.randn(2, 3, 32 if name == "vit_b_16" else 64, 32 if name == "vit_b_16" else 64)
    with torch.no_grad():
        _check(model, x, max_graphs=1)


def test_torchvision_resnet_training_gradients():
    models = pytest.importorskip("torchvision.models")
    model = models.resnet18(weights=None, num_classes=10).train()
    compiled = tensorjit.compile(model, backend="eager")
    x = torch.randn(4, 3, 32, 32)
    torch.manual_seed(0)
    compiled(x).sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    torch.manual_seed(0)
    # Same model, eager: BatchNorm running stats moved once more, which does not affect train-mode outputs.
    model(x).sum().backward()
    for got, want in zip(grads, (p.grad for p in model.parameters())):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["resnet18", "vit_tiny_patch16_224", "convnext_atto"])
def test_timm_inference(name):
    timm = pytest.importorskip("timm")
    kwargs = {"img_size": 32} if name.startswith("vit") else {}
    model = timm.create_model(name, pretrained=False, num_classes=10, **kwargs).eval()
    with torch.no_grad():
        _check(model, torch.randn(2, 3, 32, 32), max_graphs=2)


def _hf_models():
    transformers = pytest.importorskip("transformers")
    return {
        "gpt2": lambda: transformers.GPT2LMHeadModel(transformers.GPT2Config(
            n_layer=2, n_embd=64, n_head=4, vocab_size=100)),
        "bert": lambda: transformers.BertModel(transformers.BertConfig(
            num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128, vocab_size=100)),
        "llama": lambda: transformers.LlamaForCausalLM(transformers.LlamaConfig(
            num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=128, vocab_size=100)),
    }


@pytest.mark.parametrize("name", ["gpt2", "bert", "llama"])
def test_transformers_inference(name):
    model = _hf_models()[name]().eval()
    ids = torch.randint(0, 100, (2, 16))
    torch.manual_seed(0)
    compiled = tensorjit.compile(model, backend="eager")
    with torch.no_grad():
        expected = model(input_ids=ids)
        actual = compiled(input_ids=ids)
    key = "logits" if "logits" in expected else "last_hidden_state"
    torch.testing.assert_close(actual[key], expected[key], rtol=1e-4, atol=1e-4)
