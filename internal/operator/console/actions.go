package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/postbox/postbox/internal/operator/story"
	"github.com/postbox/postbox/outbox"
	"github.com/postbox/postbox/webhook"
)

// actionTimeout bounds an action: a replay makes its first attempts
// (each within the webhook delivery budget) before it returns. It stays
// under the HTTP server's write timeout (cmd/worker: 60 s), so the answer
// reaches the browser; attempts it cuts short are the retry worker's.
const actionTimeout = 45 * time.Second

// An action is one thing the console changes. Every action takes a row
// id; some take a --since or a reason.
type action struct {
	Title  string // the confirmation page's question
	Button string
	Since  bool // takes a since (ReplayFailedSince)
	Reason bool // takes a reason (disable)
	// Replay: needs Config.Replayer.
	Replay bool
	// Explain is what the confirmation page says will happen.
	Explain string
	// back is the page of the row the action is about.
	back story.Kind
	run  func(ctx context.Context, c *Console, id string, in actionInput) (string, error)
	// warn, if set, says on the confirmation page why the action would not
	// do what the operator wants for this row, and names the action that
	// would (alt, "" for none).
	warn func(ctx context.Context, c *Console, id string) (warning, alt string, err error)
	// reach, if set, lists on the confirmation page the endpoints the
	// action will send to.
	reach func(ctx context.Context, c *Console, id string) ([]webhook.Endpoint, error)
}

type actionInput struct {
	since  time.Time
	reason string
	user   string // the operator, for what records who did it
}

var actions = map[string]action{
	"requeue-email": {
		Title: "Requeue this failed email?", Button: "Requeue",
		Explain: "The row goes back to pending with attempts 0, due now: the workers send it again within seconds. " +
			"Only a failed row is requeued; any other state is refused with the reason.",
		back: story.KindEmail,
		run: func(ctx context.Context, c *Console, id string, in actionInput) (string, error) {
			if err := outbox.Requeue(ctx, c.db, id, in.user); err != nil {
				return "", err
			}
			return "email " + id + " requeued: pending, attempts 0, due now", nil
		},
		warn: suppressedRecipient,
	},
	"lift-and-requeue-email": {
		Title: "Lift the suppression of this email's recipient, and requeue the email?", Button: "Lift and requeue",
		Explain: "The recipient's address comes off the suppression list (the lifting is logged with your name), then the " +
			"failed row goes back to pending with attempts 0, due now, and the workers send it within seconds.",
		back: story.KindEmail,
		run: func(ctx context.Context, c *Console, id string, in actionInput) (string, error) {
			rec, err := outbox.Get(ctx, c.db, id)
			if err != nil {
				return "", err
			}
			if rec.Status != outbox.StatusFailed {
				// Refused before anything changes: lifting alone is its own action.
				return "", fmt.Errorf("email %s is %s, not failed: nothing to requeue", id, rec.Status)
			}
			lifted, err := c.lift(ctx, rec, in)
			if err != nil && !errors.Is(err, outbox.ErrNotSuppressed) {
				return "", err
			}
			if err := outbox.Requeue(ctx, c.db, id, in.user); err != nil {
				return "", err
			}
			if lifted.Email == "" {
				return "email " + id + " requeued (its recipient was no longer suppressed): pending, attempts 0, due now", nil
			}
			return "suppression of " + lifted.Email + " lifted; email " + id + " requeued: pending, attempts 0, due now", nil
		},
	},
	"lift-suppression": {
		Title: "Lift the suppression of this email's recipient?", Button: "Lift",
		Explain: "The recipient's address comes off the suppression list (the lifting is logged with your name), so " +
			"the next email to it is sent. A failed email is not sent again by this: requeue it afterwards.",
		back: story.KindEmail,
		run: func(ctx context.Context, c *Console, id string, in actionInput) (string, error) {
			rec, err := outbox.Get(ctx, c.db, id)
			if err != nil {
				return "", err
			}
			lifted, err := c.lift(ctx, rec, in)
			if err != nil {
				return "", err
			}
			return "suppression of " + lifted.Email + " lifted (it was: " + lifted.Reason + ")", nil
		},
	},
	"requeue-delivery": {
		Title: "Requeue this failed delivery?", Button: "Requeue",
		Explain: "The delivery goes back to pending with attempts 0, due now: the retry lane sends it to its own " +
			"endpoint again, under the same webhook-id, within the endpoint's rate limit and breaker. No other " +
			"endpoint receives anything (a replay would make a new event for every endpoint the original went to).",
		back: story.KindDelivery,
		run: func(ctx context.Context, c *Console, id string, in actionInput) (string, error) {
			if err := webhook.RequeueDelivery(ctx, c.db, id, in.user); err != nil {
				return "", err
			}
			return "delivery " + id + " requeued: pending, attempts 0, due now", nil
		},
	},
	"skip-ordered-head": {
		Title: "Let this delivery's ordering key go on without it?", Button: "Let the key go on",
		Explain: "The delivery stays failed, and the deliveries of its ordering key to this endpoint that wait behind " +
			"it go out, in order, from the next one on. Requeue it instead to send it again before them.",
		back: story.KindDelivery,
		run: func(ctx context.Context, c *Console, id string, _ actionInput) (string, error) {
			if err := webhook.SkipOrderedHead(ctx, c.db, id); err != nil {
				return "", err
			}
			return "delivery " + id + " skipped: the rest of its key goes on without it", nil
		},
	},
	"requeue-webhook-outbox": {
		Title: "Requeue this failed webhook_outbox row?", Button: "Requeue",
		Explain: "The row goes back to pending with attempts 0, due now, and the workers fan its event out to every " +
			"matching enabled endpoint.",
		back: story.KindWebhookOutbox,
		run: func(ctx context.Context, c *Console, id string, _ actionInput) (string, error) {
			if err := webhook.RequeueOutbox(ctx, c.db, id); err != nil {
				return "", err
			}
			return "webhook outbox row " + id + " requeued: pending, attempts 0, due now", nil
		},
	},
	"cancel-email": {
		Title: "Cancel this pending email?", Button: "Cancel the email",
		Explain: "The row becomes cancelled, recorded with your name: it is never sent, and its links and PDF are " +
			"removed from the stored payload, so it cannot be sent later either. An email a worker is sending now " +
			"is refused with when its claim ends; any other state is refused with the reason.",
		back: story.KindEmail,
		run: func(ctx context.Context, c *Console, id string, in actionInput) (string, error) {
			if err := outbox.Cancel(ctx, c.db, id, in.user); err != nil {
				return "", err
			}
			return "email " + id + " cancelled: it will not be sent", nil
		},
	},
	"cancel-webhook-outbox": {
		Title: "Cancel this pending webhook_outbox row?", Button: "Cancel the event",
		Explain: "The row becomes cancelled, recorded with your name: its event is never fanned out, so no endpoint " +
			"receives it. An event already fanned out is refused: its deliveries are not cancelled by this.",
		back: story.KindWebhookOutbox,
		run: func(ctx context.Context, c *Console, id string, in actionInput) (string, error) {
			if err := webhook.Cancel(ctx, c.db, id, in.user); err != nil {
				return "", err
			}
			return "webhook outbox row " + id + " cancelled: it will not be fanned out", nil
		},
	},
	"replay-event": {
		Title: "Replay this event?", Button: "Replay", Replay: true,
		Explain: "A new event with the same type and payload (a new id, so receivers do not dedupe it away, and " +
			"replay_of naming the original) is delivered where the original went: to the endpoint it was addressed " +
			"to, or to every enabled endpoint now subscribed to its type. This is how a failed delivery is sent " +
			"again. The first attempts are made before the page returns.",
		back: story.KindEvent,
		reach: func(ctx context.Context, c *Console, id string) ([]webhook.Endpoint, error) {
			return webhook.ReplayTargets(ctx, c.db, id)
		},
		run: func(ctx context.Context, c *Console, id string, _ actionInput) (string, error) {
			rep, err := c.replayer.ReplayEvent(ctx, id)
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("event %s replayed as %s: %d deliveries; %d succeeded, %d will retry, %d failed",
				rep.ReplayOf, rep.EventID, rep.Deliveries, rep.Attempts.Sent, rep.Attempts.Retried, rep.Attempts.Failed), nil
		},
	},
	"replay-endpoint": {
		Title: "Replay this endpoint's failed deliveries?", Button: "Replay", Replay: true, Since: true,
		Explain: "Every event whose delivery to this endpoint failed since the time given, and has not reached it " +
			"since, is replayed to this endpoint only, each once. The endpoint must be enabled.",
		back: story.KindEndpoint,
		run: func(ctx context.Context, c *Console, id string, in actionInput) (string, error) {
			rb, err := c.replayer.ReplayFailedSince(ctx, id, in.since)
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("endpoint %s: %d events replayed (failed since %s): %d deliveries; %d succeeded, %d will retry, %d failed",
				id, rb.Events, in.since.UTC().Format(time.RFC3339), rb.Deliveries, rb.Attempts.Sent, rb.Attempts.Retried, rb.Attempts.Failed), nil
		},
	},
	"disable-endpoint": {
		Title: "Disable this endpoint?", Button: "Disable", Reason: true,
		Explain: "New events stop fanning out to it; its pending deliveries fail when the retry worker reaches them " +
			"(replay them once it is enabled again).",
		back: story.KindEndpoint,
		run: func(ctx context.Context, c *Console, id string, in actionInput) (string, error) {
			if err := webhook.DisableEndpoint(ctx, c.db, id, in.reason); err != nil {
				return "", err
			}
			return "endpoint " + id + " disabled", nil
		},
	},
	"enable-endpoint": {
		Title: "Enable this endpoint?", Button: "Enable",
		Explain: "New events fan out to it again. Events it missed while disabled are not sent by this: replay " +
			"them with \"Replay failed since\".",
		back: story.KindEndpoint,
		run: func(ctx context.Context, c *Console, id string, _ actionInput) (string, error) {
			if err := webhook.EnableEndpoint(ctx, c.db, id); err != nil {
				return "", err
			}
			return "endpoint " + id + " enabled", nil
		},
	},
}

type confirmView struct {
	Name    string
	Action  action
	ID      string
	Since   string
	Back    string
	Warning string // why the action would not help this row
	Alt     string // the action that would, with its confirmation page
	// Reaches lists Reach: the endpoints the action sends to.
	Reaches bool
	Reach   []reached
}

// reached is an endpoint an action sends to, as its confirmation lists it.
type reached struct {
	ID, URL, Page string
}

// lift takes rec's recipient off the suppression list, logged with the
// operator's name.
func (c *Console) lift(ctx context.Context, rec outbox.Record, in actionInput) (outbox.Suppression, error) {
	return outbox.LiftSuppression(ctx, c.db, rec.To, in.user, c.logger)
}

// suppressedRecipient warns that requeueing an email to a suppressed
// address fails it again at once, and offers lift-then-requeue instead.
func suppressedRecipient(ctx context.Context, c *Console, id string) (string, string, error) {
	rec, err := outbox.Get(ctx, c.db, id)
	if errors.Is(err, outbox.ErrNotFound) {
		return "", "", nil // the action itself says so, if it is confirmed
	}
	if err != nil {
		return "", "", err
	}
	s, suppressed, err := outbox.CheckSuppression(ctx, c.db, rec.To)
	if err != nil || !suppressed {
		return "", "", err
	}
	return "The recipient " + s.Email + " is suppressed (" + s.Reason + "): a requeued email fails again at once, " +
		"without reaching the relay.", "lift-and-requeue-email", nil
}

// confirm is the confirmation step: a page that says what the action will
// do, with the POST form that does it.
func (c *Console) confirm(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("action")
	a, ok := actions[name]
	if !ok || (a.Replay && c.replayer == nil) {
		c.problem(w, r, http.StatusNotFound, fmt.Sprintf("No such action %q.", name))
		return
	}
	id := r.FormValue("id")
	if !outbox.IsRowID(id) {
		c.problem(w, r, http.StatusBadRequest, fmt.Sprintf("%q is not a row id (a UUID).", id))
		return
	}
	since := r.FormValue("since")
	if a.Since && since == "" {
		since = "24h"
	}
	view := confirmView{Name: name, Action: a, ID: id, Since: since, Back: c.URL(a.back, id)}
	ctx, cancel := context.WithTimeout(r.Context(), pageTimeout)
	defer cancel()
	var err error
	if a.warn != nil {
		view.Warning, view.Alt, err = a.warn(ctx, c, id)
	}
	if a.reach != nil && err == nil {
		view.Reaches = true
		var eps []webhook.Endpoint
		eps, err = a.reach(ctx, c, id)
		for _, ep := range eps {
			view.Reach = append(view.Reach, reached{ID: ep.ID, URL: webhook.RedactURL(ep.URL), Page: c.URL(story.KindEndpoint, ep.ID)})
		}
		if errors.Is(err, webhook.ErrNotFound) {
			view.Reaches, err = false, nil // the action itself says so, if it is confirmed
		}
	}
	if err != nil {
		c.logger.Error("console: reading the row for the confirmation failed", "action", name, "error", err.Error())
		c.problem(w, r, http.StatusInternalServerError, "Reading the row failed; see the worker's log.")
		return
	}
	c.render(w, r, http.StatusOK, "confirm", a.Title, view)
}

// do runs a confirmed action. Each refusal changes nothing: the CSRF token
// is checked first, then the confirmation, then the input.
func (c *Console) do(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	name := r.PathValue("action")
	u := user(r)
	if !c.checkCSRF(r) {
		c.logger.Warn("console: action refused: missing or invalid CSRF token", "user", u, "action", name)
		c.problem(w, r, http.StatusForbidden, "Refused: the form's CSRF token is missing or invalid. Nothing was changed. "+
			"Reload the page and try again.")
		return
	}
	a, ok := actions[name]
	if !ok || (a.Replay && c.replayer == nil) {
		c.problem(w, r, http.StatusNotFound, fmt.Sprintf("No such action %q. Nothing was changed.", name))
		return
	}
	if r.PostFormValue("confirm") != "yes" {
		c.problem(w, r, http.StatusBadRequest, "Refused: the action was not confirmed. Nothing was changed.")
		return
	}
	id := r.PostFormValue("id")
	if !outbox.IsRowID(id) {
		c.problem(w, r, http.StatusBadRequest, fmt.Sprintf("Refused: %q is not a row id (a UUID). Nothing was changed.", id))
		return
	}
	in := actionInput{user: u}
	if a.Since {
		var err error
		if in.since, err = webhook.ParseSince(r.PostFormValue("since"), c.now()); err != nil {
			c.problem(w, r, http.StatusBadRequest, "Refused: "+err.Error()+". Nothing was changed.")
			return
		}
	}
	if a.Reason {
		in.reason = r.PostFormValue("reason")
		if in.reason != "" {
			in.reason += " (" + u + ")"
		} else {
			in.reason = "disabled by " + u + " in the console"
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), actionTimeout)
	defer cancel()
	msg, err := a.run(ctx, c, id, in)
	if err != nil {
		c.logger.Warn("console: action refused", "user", u, "action", name, "id", id, "error", err.Error())
		status := http.StatusConflict
		switch {
		case errors.Is(err, outbox.ErrNotFound), errors.Is(err, webhook.ErrNotFound), errors.Is(err, outbox.ErrNotSuppressed):
			status = http.StatusNotFound
		case ctx.Err() != nil:
			status = http.StatusGatewayTimeout
		}
		c.problem(w, r, status, "Refused: "+err.Error())
		return
	}
	c.logger.Info("console: action done", "user", u, "action", name, "id", id, "result", msg)
	c.redirectDone(w, r, c.URL(a.back, id), msg)
}
