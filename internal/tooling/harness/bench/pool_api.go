package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postbox/postbox/internal/operator/httpapi"
	"github.com/postbox/postbox/internal/tooling/testsupport/invoice"
	"github.com/postbox/postbox/webhook"
)

// The pool-api section: enqueue over the HTTP API against the Go API, in
// one run. One `worker run` with API_KEYS (API_RATE_LIMIT=0) fans the
// events out meanwhile (to no endpoint); EnqueueGoroutines goroutines enqueue 1 KB invoice
// events for EnqueueDuration, either with webhook.EnqueueEvent, each in a
// transaction of its own, or with POST /api/v1/events on keep-alive
// connections (one per goroutine), each answered once its row committed.
// Trials alternate the two. Then a retry after a timeout: a request given
// up after a millisecond and sent again with the same Idempotency-Key
// must leave one row.
const apiAimRatio = 0.8

func (pr *poolRunner) apiSection(ctx context.Context) error {
	key, entry, err := httpapi.NewKey("bench")
	if err != nil {
		return err
	}
	cases := []bool{false, true} // over HTTP?
	rates := map[bool][]float64{}
	err = pr.trials(ctx, []int{1}, func(ctx context.Context, t, rc int) error {
		for _, overHTTP := range rotate(cases, t) {
			rate, err := pr.apiRun(ctx, rc, overHTTP, key, entry)
			if err != nil {
				return err
			}
			rates[overHTTP] = append(rates[overHTTP], rate)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if median(rates[false]) > 0 {
		r := median(rates[true]) / median(rates[false])
		pr.add(Row{Section: titlePoolAPI, Path: "ratio: POST /api/v1/events / webhook.EnqueueEvent",
			Figure: fmt.Sprintf("%.2f", r), Unit: "×", Value: r,
			Notes: fmt.Sprintf("medians of %s (enqueues/s); %s: the aim is ≥ %.2f×", perTrial(rates[true], rates[false]), verdict(r >= apiAimRatio), apiAimRatio)})
	}
	return nil
}

// apiRun enqueues for EnqueueDuration and returns the committed enqueues
// per second; over HTTP it also checks a retry after a timeout.
func (pr *poolRunner) apiRun(ctx context.Context, rc int, overHTTP bool, key, entry string) (float64, error) {
	label := "webhook.EnqueueEvent (Go, in the application's transaction), 1 KB payloads"
	if overHTTP {
		label = "POST /api/v1/events (keep-alive, answered once committed), 1 KB payloads"
	}
	if err := pr.truncate(ctx); err != nil {
		return 0, err
	}
	// No endpoint: the worker fans each event out to nobody, the same
	// small work behind either way of enqueueing, so the figures compare
	// the enqueues and not how much delivery each left room for.
	if err := pr.settle(ctx, pr.ctl, "webhook_outbox", "webhook_endpoints"); err != nil {
		return 0, err
	}
	g := pr.po.EnqueueGoroutines
	app, err := pr.pool(ctx, g+poolReserve)
	if err != nil {
		return 0, err
	}
	defer app.Close()
	procs, _, stop, err := pr.startHooks(ctx, pathPostbox, rc, pr.po.WebhookConcurrency, "api "+label, "API_KEYS="+entry, "API_RATE_LIMIT=0")
	if err != nil {
		return 0, err
	}
	defer stop()

	pr.logf("pool api: %s: %d goroutines for %s", label, g, pr.po.EnqueueDuration)
	split := splitFrom(ctx, pr.ctl, procs)
	var (
		n       int
		elapsed time.Duration
		lat     []time.Duration
	)
	if overHTTP {
		n, elapsed, lat, err = postFor(ctx, "http://"+procs[0].httpAddr+httpapi.Prefix+"/events", key, g, pr.po.EnqueueDuration)
	} else {
		var enq webhook.Enqueuer
		n, elapsed, lat, err = enqueueFor(ctx, app, g, pr.po.EnqueueDuration, func(ctx context.Context, tx pgx.Tx, i int) error {
			_, err := enq.EnqueueEvent(ctx, tx, webhook.Event{Tenant: "t0", Type: "invoice.paid", Payload: invoice.Payload(i)})
			return err
		})
	}
	used := split()
	if err != nil {
		return 0, fmt.Errorf("pool api %s: %w", label, err)
	}
	var rows int
	if err := pr.ctl.QueryRow(ctx, `SELECT count(*) FROM webhook_outbox`).Scan(&rows); err != nil {
		return 0, err
	}
	if rows != n {
		return 0, checkf("pool api %s: %d rows in webhook_outbox, %d enqueues answered", label, rows, n)
	}
	rate := perSecond(n, elapsed)
	ps := percentiles(lat, 50, 99)
	pr.add(Row{Section: titlePoolAPI, Path: label, Figure: fmtRate(rate), Unit: "enq/s", Value: rate,
		Notes: fmt.Sprintf("%d enqueues by %d goroutines in %.1f s, 1 worker process fanning out meanwhile; per enqueue p50 %s ms, p99 %s ms; machine CPU %.2f ms per enqueue (%s)",
			n, g, elapsed.Seconds(), fmtMs(ps[0]), fmtMs(ps[1]), float64(used.machine.Microseconds())/1000/float64(max(n, 1)), used.perMessage("worker", n))})
	if overHTTP {
		if err := retryAfterTimeout(ctx, "http://"+procs[0].httpAddr+httpapi.Prefix+"/events", key, pr); err != nil {
			return 0, err
		}
	}
	return rate, nil
}

// postFor posts 1 KB invoice events from g goroutines, each on its own
// keep-alive connection, until d has passed (loadFor); a non-202 answer
// stops them.
func postFor(ctx context.Context, url, key string, g int, d time.Duration) (int, time.Duration, []time.Duration, error) {
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: g, MaxConnsPerHost: g}}
	defer client.CloseIdleConnections()
	return loadFor(ctx, g, d, func(ctx context.Context, i int) error {
		code, err := post(ctx, client, url, key, eventBody(i), "")
		if err == nil && code != http.StatusAccepted {
			err = fmt.Errorf("POST answered %d", code)
		}
		return err
	})
}

// eventBody is POST /events's body for invoice i, built as a client that
// already holds its payload's JSON would: no re-encoding of the payload.
func eventBody(i int) []byte {
	return slices.Concat([]byte(`{"tenant":"t0","type":"invoice.paid","payload":`), invoice.Payload(i), []byte(`}`))
}

// post sends one enqueue and drains the answer, so the connection is
// reused.
func post(ctx context.Context, client *http.Client, url, key string, body []byte, idempotencyKey string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	if idempotencyKey != "" {
		req.Header.Set(httpapi.IdempotencyHeader, idempotencyKey)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// retryAfterTimeout sends an enqueue it gives up on after a millisecond,
// then the same request with the same Idempotency-Key, and checks that
// one row holds the key.
func retryAfterTimeout(ctx context.Context, url, key string, pr *poolRunner) error {
	body := eventBody(0)
	const idem = "bench-retry-after-timeout"
	impatient := &http.Client{Timeout: time.Millisecond}
	_, firstErr := post(ctx, impatient, url, key, body, idem)
	code, err := post(ctx, &http.Client{Timeout: 30 * time.Second}, url, key, body, idem)
	if err != nil || code != http.StatusAccepted {
		return fmt.Errorf("pool api: the retry after a timeout: %d, %v", code, err)
	}
	var rows int
	if err := pr.ctl.QueryRow(ctx, `SELECT count(*) FROM webhook_outbox WHERE idempotency_key = $1`, idem).Scan(&rows); err != nil {
		return err
	}
	if rows != 1 {
		return checkf("pool api: a request given up and retried with one Idempotency-Key left %d rows", rows)
	}
	first := "answered within its millisecond"
	if firstErr != nil {
		first = "given up after 1 ms"
	}
	pr.add(Row{Section: titlePoolAPI, Path: "retry after a timeout, one Idempotency-Key", Figure: "1", Unit: "row",
		Notes: "the first request " + first + ", the retry answered 202: one webhook_outbox row holds the key"})
	return nil
}
