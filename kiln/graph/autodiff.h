// Reverse-mode autodiff over the graph IR.
//
// append_backward() takes a forward graph whose loss is a CrossEntropy node (its output is already
// d loss / d logits, scaled by the run's loss_scale) and appends the backward pass: one gradient
// rule per op, gradients of values with several users summed, and every weight State's gradient
// accumulated (+=) into the gradient State named in `grad_states`. The result is one
// forward+backward graph, compiled and memory-planned like any other (activations that the
// backward needs stay live; the plan reuses everything else).
//
// Example:
//   graph::Graph g = build_training_forward(...);            // ends in cross_entropy(grad = true)
//   g = graph::append_backward(std::move(g), ce, grads);     // grads: weight State -> grad State
#pragma once

#include <map>

#include "kiln/graph/graph.h"

namespace kiln::graph {

// `loss` is the CrossEntropy node; `grad_states` maps each weight State value to the f32 State that
// accumulates its gradient. Weight States without an entry get no gradient.
Graph append_backward(Graph forward, Value loss, const std::map<Value, Value>& grad_states);

}  // namespace kiln::graph
