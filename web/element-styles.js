// <attn-scope>'s stylesheets, as the markup its shadow root starts with: linked beside this
// script; a bundle that has no files beside it (the notebook widget: python/js/build.mjs) swaps
// this module for one that inlines them.

export const STYLE_MARKUP = ['./views.css', './attn-scope.css']
  .map((file) => `<link rel="stylesheet" href="${new URL(file, import.meta.url).href}">`)
  .join('');
