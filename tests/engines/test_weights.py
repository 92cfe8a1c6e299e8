"""Loading policies: from checkpoint directories, from several threads at once."""

from __future__ import annotations

import threading

import pytest
import torch

from mirl.engines.weights import load_model


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from tests.engines.tiny import tiny_checkpoint

    # tied input and output embeddings as SmolLM2's (the head is then not in the file and is tied at
    # load time), and layers enough that loads started together overlap
    return tiny_checkpoint(tmp_path_factory.mktemp("tiny-weights"), num_hidden_layers=12, hidden_size=128,
                           intermediate_size=256, tie_word_embeddings=True)


def test_policies_loaded_at_once_from_threads_all_get_their_weights(checkpoint):
    """transformers builds a model under process-wide settings (the meta device), so overlapping loads
    of a tied-embedding model failed ("Cannot copy out of meta tensor"), as two engines started from
    two threads of one process did."""
    ref, _ = load_model(checkpoint, "cpu", "float32")
    want = {k: v.clone() for k, v in ref.state_dict().items()}
    for _ in range(4):
        got, errors = [], []

        def load(got=got, errors=errors):
            try:
                got.append(load_model(checkpoint, "cpu", "float32")[0])
            except Exception as e:  # noqa: BLE001 - the assertion below names it
                errors.append(repr(e))

        threads = [threading.Thread(target=load) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors[0]
        for model in got:
            state = model.state_dict()
            assert all(not v.is_meta and torch.equal(v, want[k]) for k, v in state.items())
    after, _ = load_model(checkpoint, "cpu", "float32")  # nothing left behind for the next load
    assert all(torch.equal(v, want[k]) for k, v in after.state_dict().items())
