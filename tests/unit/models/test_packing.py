"""A row's several outputs in one array and back, and the scores BGE-M3's outputs are ranked by."""

from __future__ import annotations

import numpy as np

from models.packing import pack_arrays, unpack_arrays
from models.scores import late_interaction, mode_scores, sparse_dot, weighted_mean


def test_arrays_of_any_shape_round_trip_exactly():
    rng = np.random.default_rng(0)
    arrays = [
        rng.standard_normal(7).astype(np.float32),
        np.array([[3.0, 70000.0], [0.5, 0.25]], np.float32),
        rng.standard_normal((5, 4)).astype(np.float32),
        np.zeros((0, 4), np.float32),
    ]
    back = unpack_arrays(pack_arrays(arrays))
    assert [a.shape for a in back] == [a.shape for a in arrays]
    for got, expected in zip(back, arrays):
        np.testing.assert_array_equal(got, expected)
    assert unpack_arrays(pack_arrays([])) == []


def test_sparse_dot_adds_the_products_of_shared_ids_only():
    query = np.array([[2, 5, 9], [1.0, 2.0, 3.0]], np.float32)
    document = np.array([[1, 5, 9, 12], [7.0, 0.5, 2.0, 4.0]], np.float32)
    assert sparse_dot(query, document) == 2.0 * 0.5 + 3.0 * 2.0
    assert sparse_dot(query, np.zeros((2, 0), np.float32)) == 0.0


def test_mode_scores_are_flagembeddings_and_their_weighted_mean():
    rng = np.random.default_rng(1)
    unit = lambda m: m / np.linalg.norm(m, axis=-1, keepdims=True)  # noqa: E731
    query = {
        "dense": unit(rng.standard_normal(4)),
        "sparse": np.array([[1, 3], [0.5, 1.0]]),
        "colbert": unit(rng.standard_normal((3, 4))),
    }
    document = {
        "dense": unit(rng.standard_normal(4)),
        "sparse": np.array([[3], [2.0]]),
        "colbert": unit(rng.standard_normal((5, 4))),
    }
    scores = mode_scores(query, document)
    assert scores["dense"] == np.dot(query["dense"], document["dense"])
    assert scores["sparse"] == 2.0
    assert np.isclose(scores["colbert"], late_interaction(query["colbert"], document["colbert"]) / 3)
    weights = {"dense": 0.4, "sparse": 0.2, "colbert": 0.4}
    assert np.isclose(
        weighted_mean(scores, weights), (0.4 * scores["dense"] + 0.2 * scores["sparse"] + 0.4 * scores["colbert"]) / 1.0
    )
