"""The shared analysis layer between the facts and the rules.

Everything two rules both need lives here, once: grad-mode regions and the data flow of which
values are computed under which mode, module-mode state, the vocabulary of training scopes,
optimizer steps, hooks and tensor provenance, statement/block helpers for fixes, and the
project index. Rules query this layer; no rule imports another rule.
"""
