package main

// The per-row budgets (see docs/design/outbox-transport.md, Derived
// constants): each is a context deadline around its step, and each has a test
// in which a hung step costs the row that budget and no more.
func init() {
	register(
		Mutation{
			Name:    "budgets: no per-row context (PerRowBudget)",
			File:    "outbox/send.go",
			Find:    "rowCtx, cancel := context.WithTimeout(ctx, d.leases.PerRowBudget)",
			Replace: "rowCtx, cancel := context.WithCancel(ctx)",
			Pkg:     "./outbox/",
			Test:    "TestPerRowBudget_BoundsTheRow",
		},
		Mutation{
			Name:    "budgets: no branding budget around the renderer (BrandingBudget)",
			File:    "outbox/send.go",
			Find:    "rctx, cancel := context.WithTimeout(ctx, d.brandingBudget)",
			Replace: "rctx, cancel := context.WithCancel(ctx)",
			Pkg:     "./outbox/",
			Test:    "TestBrandingBudget_BoundsTheRenderer",
		},
		Mutation{
			Name:    "budgets: no suppression budget on the batch's lookup (SuppressionBudget)",
			File:    "outbox/suppression.go",
			Find:    "ctx, cancel := context.WithTimeout(ctx, d.suppressionBudget)",
			Replace: "ctx, cancel := context.WithCancel(ctx)",
			Pkg:     "./outbox/",
			Test:    "TestSuppressionBudget_BoundsTheLookup",
		},
		Mutation{
			Name:    "budgets: no suppression budget on a row's own lookup (SuppressionBudget)",
			File:    "outbox/suppression.go",
			Find:    "ctx, cancel := context.WithTimeout(ctx, budget)",
			Replace: "ctx, cancel := context.WithCancel(ctx)",
			Pkg:     "./outbox/",
			Test:    "TestSuppressionBudget_BoundsTheLookup",
		},
		Mutation{
			Name:    "budgets: no dial budget (DialBudget)",
			File:    "smtp/deliver.go",
			Find:    "dctx, cancel := context.WithTimeout(ctx, m.dialBudget)",
			Replace: "dctx, cancel := context.WithCancel(ctx)",
			Pkg:     "./smtp/",
			Test:    "TestDialBudget_BoundsTheDial",
		},
	)
}
