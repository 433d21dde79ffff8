// What the loaded model is, for the page to decide by and to describe (issue 30: one family
// contract): the engine's `ModelInfo.architecture` (src/report.rs; `Architecture` in
// src/model/config.rs), never `model_type`, which is a name to show. The views read
// `modelInfo.architecture`:
//
//   {kind: 'encoder' | 'decoder' | 'encoder_decoder',
//    positions: {type: 'learned', offset} | {type: 'sinusoidal'} | {type: 'rotary'},
//    norm: 'layer' | 'rms', norm_order: 'pre' | 'post', norm_eps,
//    feed_forward: {type: 'plain' | 'gated', activation}, heads: {query, key_value}, head_dim,
//    biases: {qkv, output, feed_forward}, lm_head: 'none' | 'tied' | 'separate',
//    logit_cap: null | c (the logits z soft-capped as c·tanh(z/c): Gemma's), token_types,
//    layers: [{attention: 'global' | 'sliding', window?: number,
//              rotary: null | {theta, head_dim, rope_type: 'default' | 'linear' | 'llama3' | 'yarn',
//                              its parameters (factor, …), inv_freq: the θᵢ the engines turn by,
//                              attention_scaling}}]}

/** `info` with its `architecture`: the engine's, or (an engine built before it sent one) the
 *  one its other fields imply. The one place the page reads a model's architecture from. */
export function withArchitecture(info) {
  return info.architecture ? info : { ...info, architecture: legacyArchitecture(info) };
}

/** The architecture of the families an engine without `architecture` runs (BERT, RoBERTa,
 *  DistilBERT, GPT-2, Marian): LayerNorm, a plain feed-forward, a key/value head per query head,
 *  biases everywhere, learned positions but for an encoder–decoder's sinusoids. */
function legacyArchitecture(info) {
  const kind = info.decoder ? 'encoder_decoder' : info.stack === 'decoder' ? 'decoder' : 'encoder';
  return {
    kind,
    positions: kind === 'encoder_decoder' ? { type: 'sinusoidal' } : { type: 'learned', offset: info.position_offset ?? 0 },
    norm: 'layer', norm_order: info.layer_norm_order ?? 'post', norm_eps: null,
    feed_forward: { type: 'plain', activation: info.hidden_act ?? 'gelu' },
    heads: { query: info.heads, key_value: info.heads }, head_dim: info.head_dim,
    biases: { qkv: true, output: true, feed_forward: true },
    lm_head: info.lm_head ? 'tied' : 'none',
    logit_cap: null,
    token_types: Boolean(info.token_types),
    layers: Array.from({ length: info.layers ?? 0 }, () => ({ attention: 'global', rotary: null })),
  };
}

/** The stack a model's own layers are, in words: 'encoder' (an encoder–decoder's first), or
 *  'decoder' for a decoder-only model. */
export const stackWord = (arch) => (arch?.kind === 'decoder' ? 'decoder' : 'encoder');

/** Whether the model reads a sentence pair (a decoder-only model reads one text). */
export const readsPair = (arch) => arch?.kind !== 'decoder';

/** The norm's name: 'LayerNorm' or 'RMSNorm'. */
export const normName = (arch) => (arch?.norm === 'rms' ? 'RMSNorm' : 'LayerNorm');

/** The feed-forward's steps in words: `Linear → GELU → Linear`, or a gated one's
 *  `act(gate) ⊙ up → down` named by its activation (SiLU: SwiGLU). */
export function ffnWords(arch) {
  const ff = arch?.feed_forward, act = ff?.activation ?? 'activation';
  const name = { gelu: 'GELU', gelu_tanh: 'GELU', relu: 'ReLU', silu: 'SiLU' }[act] ?? act;
  if (ff?.type !== 'gated') return `Linear → ${name} → Linear`;
  const glu = name === 'SiLU' ? 'SwiGLU' : name === 'GELU' ? 'GeGLU' : 'gated';
  return `${name}(gate) ⊙ up → down (${glu})`;
}
