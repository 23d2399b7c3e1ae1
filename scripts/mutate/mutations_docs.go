package main

// Mutations of the pages that name the code: ARCHITECTURE.md's map and the
// packages' doc links must name what exists (docs/names_test.go).
func init() {
	register(
		Mutation{
			Name:    "docs: ARCHITECTURE names a function the code does not have",
			File:    "docs/ARCHITECTURE.md",
			Find:    "`pgtext.LastError`",
			Replace: "`pgtext.CleanError`",
			Pkg:     "./docs/",
			Test:    "TestPages_NameWhatExists",
		},
		Mutation{
			Name:    "docs: ARCHITECTURE names a file the tree does not have",
			File:    "docs/ARCHITECTURE.md",
			Find:    "| claim window | `internal/engine/claim/window.go`,",
			Replace: "| claim window | `internal/engine/claim/windows.go`,",
			Pkg:     "./docs/",
			Test:    "TestPages_NameWhatExists",
		},
		Mutation{
			Name:    "docs: a package doc links a function the package does not have",
			File:    "webhook/doc.go",
			Find:    "[Verify]",
			Replace: "[VerifyRequest]",
			Pkg:     "./docs/",
			Test:    "TestDocLinks_Resolve",
		},
	)
}
