// The <attn-scope> element (see web/attn-scope.js): load this script from where dist/ is published.
import './web/attn-scope.js';
