package main

// Mutations of the schema check's fast path (webhook/schemaquick.go): it
// proves a payload only when the library would accept it, refuses to model
// a keyword it does not read, and is the path a proven payload takes.
func init() {
	const (
		pkg  = "./webhook/"
		file = "webhook/schemaquick.go"
		same = "TestQuickSchema_NeverProvesWhatTheLibraryRefuses"
	)
	register(
		Mutation{
			Name:    "schema fast path: additionalProperties false lets any key by",
			File:    file,
			Find:    "case q.noAdditional:\n\t\t\t\treturn i, false",
			Replace: "case false:\n\t\t\t\treturn i, false",
			Pkg:     pkg, Test: same,
		},
		Mutation{
			Name:    "schema fast path: a missing required property is proven",
			File:    file,
			Find:    "return end, ok && seen == q.requiredAll && (",
			Replace: "return end, ok && (",
			Pkg:     pkg, Test: same,
		},
		Mutation{
			Name:    "schema fast path: a minimum lets one below it by",
			File:    file,
			Find:    "!bd.below && bd.inclusive && n < bd.v,",
			Replace: "!bd.below && bd.inclusive && n < bd.v-1,",
			Pkg:     pkg, Test: same,
		},
		Mutation{
			Name:    "schema fast path: a fraction passes for an integer",
			File:    file,
			Find:    "integer = false\n\t\t} else if",
			Replace: "integer = true\n\t\t} else if",
			Pkg:     pkg, Test: same,
		},
		Mutation{
			Name:    "schema fast path: an enum allows any string",
			File:    file,
			Find:    "if e == s {",
			Replace: "if e == s || true {",
			Pkg:     pkg, Test: same,
		},
		Mutation{
			Name:    "schema fast path: lengths count bytes, not characters",
			File:    file,
			Find:    "n := utf8.RuneCount(raw)",
			Replace: "n := len(raw) + 0*utf8.RuneCount(raw)",
			Pkg:     pkg, Test: same,
		},
		Mutation{
			Name:    "schema fast path: an escaped string is read as written",
			File:    file,
			Find:    "if escaped {\n\t\t\treturn end, false",
			Replace: "if escaped && false {\n\t\t\treturn end, false",
			Pkg:     pkg, Test: same,
		},
		Mutation{
			Name:    "schema fast path: an escaped key is looked up as written",
			File:    file,
			Find:    "if !ok || escaped {\n\t\t\treturn keyEnd, false",
			Replace: "if !ok || escaped && false {\n\t\t\treturn keyEnd, false",
			Pkg:     pkg, Test: same,
		},
		Mutation{
			Name:    "schema fast path: a schema with not is modelled without it",
			File:    file,
			Find:    "s.Const != nil || s.Not != nil ||",
			Replace: "s.Const != nil ||",
			Pkg:     pkg, Test: "TestQuickSchema_ModelsOnlyWhatItReads",
		},
		Mutation{
			Name:    "schema fast path: the check never takes it",
			File:    "webhook/schema.go",
			Find:    "if s.quick != nil && s.quick.proves(payload) {",
			Replace: "if false && s.quick != nil && s.quick.proves(payload) {",
			Pkg:     pkg, Test: "TestQuickSchema_CheckTakesTheFastPath",
		},
	)
}
