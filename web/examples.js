// Worked examples a teacher can jump to. Each sets the intent (and a head worth looking at).

export const EXAMPLES = [
  {
    id: 'it', title: 'coreference: what does "it" attend to?',
    state: { sentences: ['The animal didn\'t cross the street because it was too tired.'], pair: '', mask: 'padding', batch: false, layer: 3, head: 1 },
  },
  {
    id: 'arrow', title: 'ambiguity: "time flies like an arrow"',
    state: { sentences: ['time flies like an arrow'], pair: '', mask: 'padding', batch: false, layer: 5, head: 3 },
  },
  {
    id: 'batch', title: 'a padded batch: [PAD] rows and columns',
    state: { sentences: ['time flies like an arrow', 'The quick brown fox jumps over the lazy dog by the river.', 'hi'], pair: '', mask: 'padding', batch: true, item: 2, layer: 0, head: 0 },
  },
  {
    id: 'causal', title: 'the causal (no-peek) mask',
    state: { sentences: ['time flies like an arrow', 'fruit flies like a banana, they say'], pair: '', mask: 'causal', batch: true, item: 0, layer: 0, head: 0 },
  },
  {
    id: 'pair', title: 'a sentence pair: [SEP] and token types',
    state: { sentences: ['The cat sat on the mat.'], pair: 'It was very comfortable.', mask: 'padding', batch: false, layer: 3, head: 0 },
  },
];
