package webhook

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Secret rotation. webhook_endpoints.secret is the primary: what new
// receivers are given and what signs first. RotateSecret makes a fresh
// primary and keeps the old one in webhook_endpoint_secrets until it
// expires; until then every request carries one signature per active
// secret, space-separated ("v1,<new> v1,<old>"), as Standard Webhooks
// defines, so a receiver verifies with whichever secret it holds and can
// switch at its own pace. After the expiry the old secret signs nothing.

// olderSecretsSQL is the endpoint's (alias ep) active rotated-out secrets,
// newest first, for the queries that load an attempt.
const olderSecretsSQL = `ARRAY(SELECT s.secret FROM webhook_endpoint_secrets s
	WHERE s.endpoint_id = ep.id AND s.expires_at > now() ORDER BY s.created_at DESC, s.id DESC)`

// MaxRotationKeep bounds how long a rotated-out secret keeps signing.
const MaxRotationKeep = 30 * 24 * time.Hour

// Rotation is what RotateSecret did.
type Rotation struct {
	EndpointID string `json:"id"`
	// Secret is the new primary secret: shown once, to hand to the
	// receiver; never logged or stored elsewhere.
	Secret string `json:"secret"`
	// OldExpiresAt is when the previous secret stops signing; zero when
	// keep was zero (it stopped at once).
	OldExpiresAt time.Time `json:"old_secret_expires_at,omitzero"`
}

// RotateSecret gives endpoint id a new primary secret (secret, or a fresh
// one when empty) and keeps the old one signing for keep (0 stops it at
// once; at most MaxRotationKeep). Secrets rotated out earlier that are
// still active stay so until their own expiry; expired ones are deleted.
func RotateSecret(ctx context.Context, pool DB, id, secret string, keep time.Duration) (Rotation, error) {
	if err := validateID(id); err != nil {
		return Rotation{}, err
	}
	if keep < 0 || keep > MaxRotationKeep {
		return Rotation{}, fmt.Errorf("%w: keep %s must be in 0..%s", ErrInvalidEndpoint, keep, MaxRotationKeep)
	}
	if secret == "" {
		var err error
		if secret, err = NewSecret(); err != nil {
			return Rotation{}, err
		}
	} else if err := ValidateSecret(secret); err != nil {
		return Rotation{}, err
	}
	r := Rotation{EndpointID: id, Secret: secret}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var old string
		if err := tx.QueryRow(ctx, `SELECT secret FROM webhook_endpoints WHERE id = $1 FOR NO KEY UPDATE`, id).Scan(&old); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("%w: endpoint %s", ErrNotFound, id)
			}
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM webhook_endpoint_secrets WHERE endpoint_id = $1 AND expires_at <= now()`, id); err != nil {
			return err
		}
		if keep > 0 {
			if err := tx.QueryRow(ctx, `INSERT INTO webhook_endpoint_secrets (endpoint_id, secret, expires_at)
VALUES ($1, $2, now() + $3::interval) RETURNING expires_at`, id, old, keep).Scan(&r.OldExpiresAt); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, `UPDATE webhook_endpoints SET secret = $2, updated_at = now() WHERE id = $1`, id, secret)
		return err
	})
	switch {
	case errors.Is(err, ErrNotFound):
		return Rotation{}, err // it names the endpoint already
	case err != nil:
		return Rotation{}, fmt.Errorf("webhook: rotate secret of endpoint %s: %w", id, err)
	}
	return r, nil
}

// signingKeys decodes the primary secret and the older active ones.
func signingKeys(primary string, older []string) ([][]byte, error) {
	keys := make([][]byte, 0, 1+len(older))
	for i, s := range append([]string{primary}, older...) {
		key, err := secretKey(s)
		if err != nil {
			if i > 0 {
				return nil, fmt.Errorf("rotated-out secret %d: %w", i, err)
			}
			return nil, err
		}
		keys = append(keys, key)
	}
	return keys, nil
}

// signAll is the webhook-signature value for every key: the signatures
// space-separated, primary first.
func signAll(keys [][]byte, msgID string, ts time.Time, body []byte) string {
	sigs := make([]string, len(keys))
	for i, k := range keys {
		sigs[i] = sign(k, msgID, ts, body)
	}
	return strings.Join(sigs, " ")
}

// EndpointSecret returns endpoint id's primary signing secret, for its
// owner to give the receiver again: the one read that shows a secret after
// CreateEndpoint. Listings and pages never carry it unasked.
func EndpointSecret(ctx context.Context, db DB, id string) (string, error) {
	if err := validateID(id); err != nil {
		return "", err
	}
	var secret string
	err := db.QueryRow(ctx, `SELECT secret FROM webhook_endpoints WHERE id = $1`, id).Scan(&secret)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return "", fmt.Errorf("%w: endpoint %s", ErrNotFound, id)
	case err != nil:
		return "", fmt.Errorf("webhook: read the secret of endpoint %s: %w", id, err)
	}
	return secret, nil
}
