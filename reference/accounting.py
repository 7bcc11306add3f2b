"""Accounting reference: parameters and forward matmul FLOPs (2*m*n*p per matmul)."""


def transformer_accounting(vocab_size, context_length, d_model, num_layers, num_heads, d_ff,
                           num_kv_heads=None, batch_size=1, kv_cache_dtype="float32") -> dict[str, int]:
    V, T, d, L = vocab_size, context_length, d_model, num_layers
    kv = (num_kv_heads or num_heads) * (d // num_heads)  # width of the K and V projections
    params = {
        "params.token_embeddings": V * d,
        "params.attention": L * (2 * d * d + 2 * d * kv),
        "params.ffn": L * 3 * d * d_ff,
        "params.norms": L * 2 * d + d,
        "params.lm_head": V * d,
    }
    flops = {
        "flops.attention_projections": L * (2 * 2 * T * d * d + 2 * 2 * T * d * kv),
        "flops.attention_scores": L * 2 * T * T * d,
        "flops.attention_values": L * 2 * T * T * d,
        "flops.ffn": L * 3 * 2 * T * d * d_ff,
        "flops.lm_head": 2 * T * d * V,
    }
    return {**params, "params.total": sum(params.values()), **flops, "flops.total": sum(flops.values()),
            **_kv_cache(L, kv, T, batch_size, kv_cache_dtype)}


KV_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


def _kv_cache(num_layers, kv_width, context_length, batch_size, kv_cache_dtype) -> dict[str, int]:
    per_token = 2 * num_layers * kv_width * KV_BYTES[kv_cache_dtype]  # K and V of every layer
    return {"kv_cache.bytes_per_token": per_token, "kv_cache.bytes": per_token * context_length * batch_size}


def gpt2_accounting(vocab_size, context_length, d_model, num_layers, num_heads, d_ff,
                    batch_size=1, kv_cache_dtype="float32") -> dict[str, int]:
    V, T, d, L = vocab_size, context_length, d_model, num_layers
    params = {
        "params.token_embeddings": V * d,
        "params.position_embeddings": T * d,
        "params.attention": L * 4 * (d * d + d),
        "params.mlp": L * (2 * d * d_ff + d_ff + d),
        "params.norms": L * 2 * 2 * d + 2 * d,
        "params.lm_head": 0,  # tied to the token embeddings
    }
    flops = {
        "flops.attention_projections": L * 4 * 2 * T * d * d,
        "flops.attention_scores": L * 2 * T * T * d,
        "flops.attention_values": L * 2 * T * T * d,
        "flops.mlp": L * 2 * 2 * T * d * d_ff,
        "flops.lm_head": 2 * T * d * V,
    }
    return {**params, "params.total": sum(params.values()), **flops, "flops.total": sum(flops.values()),
            **_kv_cache(L, d, T, batch_size, kv_cache_dtype)}


def training_accounting(vocab_size, context_length, d_model, num_layers, num_heads, d_ff,
                        batch_size=1, param_dtype="float32", optimizer_dtype="float32") -> dict[str, int]:
    # The forward counts are transformer_accounting's (looked up through the module, so a variant of it
    # reaches these too): backward costs twice the forward, one matmul for the input gradient, one for
    # the weight gradient.
    counts = transformer_accounting(vocab_size, context_length, d_model, num_layers, num_heads, d_ff)
    params, forward = counts["params.total"], batch_size * counts["flops.total"]
    memory = {
        "memory.parameters": params * KV_BYTES[param_dtype],
        "memory.gradients": params * KV_BYTES[param_dtype],  # one gradient per parameter, in its dtype
        "memory.adamw_moments": 2 * params * KV_BYTES[optimizer_dtype],  # m and v
    }
    return {**memory, "memory.total": sum(memory.values()), "tokens": batch_size * context_length,
            "flops.forward": forward, "flops.backward": 2 * forward, "flops.total": 3 * forward}
