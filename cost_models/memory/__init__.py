"""Memory per GPU: weights, gradients, optimizer state, activations, what a runtime holds, offload."""
