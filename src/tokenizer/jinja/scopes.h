#pragma once
// jinja2 decides at compile time which names each scope owns (jinja2/idtracking.py): a name a
// scope assigns is that scope's own from its first line, so reading it before the assignment
// gives Undefined instead of the value outside (when the scope's first use of it is the
// assignment and no enclosing scope uses it). E.g. with `s` in the context,
//   {% for m in messages %}{{ s }}{% endfor %}{% set s = 1 %}
// prints nothing in the loop. This pass records, for the template and for every construct that
// opens a scope (for body and else, macro, call block, set block, filter block, with, and
// generation/block), the names that start out Undefined; the interpreter binds them on entry.

#include "tokenizer/jinja/ast.h"

namespace ls::jinja {

void resolve_scopes(TemplateAst& ast);

}  // namespace ls::jinja
