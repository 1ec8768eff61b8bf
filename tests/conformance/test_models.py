"""Stock torch.nn modules and small models of the usual shapes, eager against compiled.

Recurrent layers, attention, transformer layers, embeddings, normalization and
pooling: the modules users actually hand to a compiler, at tiny sizes.
"""

import pytest
import torch

from .harness import check

SEED = 0


def small(module_factory):
    torch.manual_seed(SEED)
    return module_factory()


@pytest.mark.parametrize("factory,shape", [
    (lambda: torch.nn.LSTM(4, 5, batch_first=True), (2, 3, 4)),
    (lambda: torch.nn.GRU(4, 5, num_layers=2), (3, 2, 4)),
    (lambda: torch.nn.RNN(4, 5), (3, 2, 4)),
], ids=["lstm", "gru", "rnn"])
def test_recurrent_layers(factory, shape):
    check(small(factory), torch.randn(*shape), grad=True, rtol=1e-4, atol=1e-5)


def test_multihead_attention():
    attention = small(lambda: torch.nn.MultiheadAttention(8, 2, batch_first=True))

    def fn(q, k, v):
        out, weights = attention(q, k, v, need_weights=True)
        return out, weights

    check(fn, torch.randn(2, 3, 8), torch.randn(2, 4, 8), torch.randn(2, 4, 8), rtol=1e-4, atol=1e-5)


def test_transformer_encoder_layer_train_without_dropout():
    layer = small(lambda: torch.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0,
                                                           batch_first=True))
    check(layer, torch.randn(2, 5, 8), grad=True, rtol=1e-4, atol=1e-5)


def test_transformer_encoder_layer_eval_with_mask():
    layer = small(lambda: torch.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, batch_first=True)).eval()
    mask = torch.nn.Transformer.generate_square_subsequent_mask(5)

    def fn(x):
        return layer(x, src_mask=mask, is_causal=True)

    check(fn, torch.randn(2, 5, 8), rtol=1e-4, atol=1e-5)


def test_embedding_and_pooling_classifier():
    class Classifier(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(20, 6, padding_idx=0)
            self.norm = torch.nn.LayerNorm(6)
            self.out = torch.nn.Linear(6, 3)

        def forward(self, tokens):
            h = self.norm(self.embed(tokens))
            mask = (tokens != 0).unsqueeze(-1).float()
            pooled = (h * mask).sum(1) / mask.sum(1).clamp(min=1)
            return self.out(pooled).log_softmax(-1)

    check(small(Classifier), torch.tensor([[1, 5, 0, 0], [3, 4, 9, 2]]), grad=True, graphs=1)


def test_conv_family_and_norms():
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1d = torch.nn.Conv1d(2, 3, 3, padding=1)
            self.group = torch.nn.GroupNorm(1, 3)
            self.conv_t = torch.nn.ConvTranspose1d(3, 2, 2, stride=2)
            self.instance = torch.nn.InstanceNorm1d(2, affine=True)

        def forward(self, x):
            x = torch.nn.functional.avg_pool1d(self.group(self.conv1d(x)), 2)
            return self.instance(self.conv_t(x))

    check(small(Net), torch.randn(2, 2, 8), grad=True, rtol=1e-4, atol=1e-5)


def test_residual_mlp_with_dropout_eval():
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 4)
            self.drop = torch.nn.Dropout(0.5)

        def forward(self, x):
            return x + self.drop(torch.nn.functional.silu(self.fc(x)))

    model = small(lambda: torch.nn.Sequential(Block(), Block(), torch.nn.Linear(4, 1))).eval()
    check(model, torch.randn(3, 4), grad=True, graphs=1)


def test_dropout_training_same_seed():
    from .harness import compile

    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5))
    torch.manual_seed(3)
    x = torch.randn(8, 4)
    torch.manual_seed(5)
    expected = model(x)
    compiled = compile(model, backend="eager")
    torch.manual_seed(5)
    actual = compiled(x)
    torch.testing.assert_close(actual, expected)


def test_loss_functions():
    def fn(logits, target, prediction, value):
        return (torch.nn.functional.cross_entropy(logits, target, label_smoothing=0.1),
                torch.nn.functional.nll_loss(logits.log_softmax(-1), target),
                torch.nn.functional.mse_loss(prediction, value),
                torch.nn.functional.smooth_l1_loss(prediction, value),
                torch.nn.functional.binary_cross_entropy_with_logits(prediction, value.sigmoid()))

    check(fn, torch.randn(4, 3, requires_grad=True), torch.tensor([0, 2, 1, 2]),
          torch.randn(4, requires_grad=True), torch.randn(4), grad=True, graphs=1)


def test_parameter_passed_as_argument():
    weight = torch.nn.Parameter(torch.randn(3, 3))

    def fn(x, w):
        return x @ w, isinstance(w, torch.nn.Parameter)

    check(fn, torch.randn(2, 3), weight, grad=True, graphs=1)
