package main

// Mutations of the payload-field encryption that keeps waiting rows' secrets
// off the disk in plaintext (see docs/design/outbox-transport.md, Encryption
// at rest), each named with the test that must catch it.
func init() {
	register(
		Mutation{
			// Without associated data an envelope opens anywhere: copied into
			// another row or field, it would send someone else's link.
			Name:    "encryption: drop the associated data",
			File:    "outbox/seal.go",
			Find:    `return []byte(fieldAADPrefix + rowID + "\x00" + field + "\x00" + form)`,
			Replace: `return nil`,
			Pkg:     "./outbox/",
			Test:    "TestEncryption_MovedCiphertextDoesNotOpen",
		},
		Mutation{
			Name:    "encryption: drop the encrypt-on-failure step",
			File:    "outbox/send.go",
			Find:    "seal = d.keys.sealWaiting(row, d.secretKeys)",
			Replace: "seal = noSeal",
			Pkg:     "./outbox/",
			Test:    "TestEncryption_PlainSQLRowSealedByTheMarkThatKeepsItWaiting",
		},
		Mutation{
			Name:    "encryption: Enqueue stores the secret fields in plaintext",
			File:    "outbox/enqueue.go",
			Find:    "payload, err := encodePayload(e.Keys, extra, id, email.Payload, limit)",
			Replace: "payload, err := encodePayload(nil, extra, id, email.Payload, limit)",
			Pkg:     "./outbox/",
			Test:    "TestEncryption_StoredRowHoldsNoPlaintextSecret",
		},
		Mutation{
			// The lenient reading: a field under an unknown key id is left
			// out and the email goes without its link.
			Name:    "encryption: a field that does not open is dropped instead of failing the row",
			File:    "outbox/seal.go",
			Find:    "if value, err = k.open(rowID, f.key, f.field.env); err != nil {\n\t\t\t\treturn p, fmt.Errorf(\"row %s: %w\", rowID, err)",
			Replace: "if value, err = k.open(rowID, f.key, f.field.env); err != nil {\n\t\t\t\tcontinue",
			Pkg:     "./outbox/",
			Test:    "TestEncryption_UnknownKeyIDFailsPermanently",
		},
		Mutation{
			// Parameters stay referenced so the statement still runs: only
			// the compare-and-set is gone.
			Name:    "encryption: rekey writes without its guard",
			File:    "outbox/rekey.go",
			Find:    "var rekeyGuard = `AND status = $3 AND ` + secretsSQL + ` = $4::jsonb`",
			Replace: "var rekeyGuard = `AND $3::text IS NOT NULL AND $4::jsonb IS NOT NULL`",
			Pkg:     "./outbox/",
			Test:    "TestRekey_RowChangedMidRekeyIsLeftAlone",
		},
		Mutation{
			Name:    "encryption: rekey leaves plaintext fields in plaintext",
			File:    "outbox/rekey.go",
			Find:    "case sealed && env.KeyID == active:",
			Replace: "case !sealed || env.KeyID == active:",
			Pkg:     "./outbox/",
			Test:    "TestRekey_RotationOldRowsStillSendRekeyMovesThem",
		},
		Mutation{
			Name:    "encryption: a fixed nonce",
			File:    "internal/engine/sealer/sealer.go",
			Find:    "_, _ = rand.Read(nonce) // never fails: crypto/rand crashes the program instead",
			Replace: "_ = rand.Read // the nonce stays all zeros",
			Pkg:     "./internal/engine/sealer/",
			Test:    "TestRing_SealsUnderFirstOpensWithAny",
		},
	)
}
