package browser_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/flow"
	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/runtime"
	"github.com/tenurehq/tenure/sdk"
	"github.com/tenurehq/tenure/ui"
)

// Selectors of the Downstreams pages.
const (
	downstreamRow  = `tr[data-testid="downstream-row"]`
	waitingRunRow  = `tr[data-testid="waiting-run-row"]`
	setLimitsForm  = `form[data-testid="set-limits-form"]`
	openBreakerBtn = `[data-testid="open-breaker"]`
)

// bank is a second worker of the shop: its payouts call the bank's API,
// the downstream payments, one call at a time and at most 50 a second,
// behind a circuit breaker; each call answers when the test lets it. Its
// ledger reports call the downstream ledger, whose breaker opens after
// three errors.
type bank struct {
	s      *shop
	answer chan struct{}
	payout *sdk.Workflow[string, string]
	report *sdk.Workflow[string, string]
}

// newBank starts the bank's worker on the shop's schema; its calls are
// answered and it stops when the test ends.
func (s *shop) newBank() *bank {
	s.t.Helper()
	b := &bank{s: s, answer: make(chan struct{})}
	payments := flow.New("payments", flow.Concurrency(1), flow.Rate(50, time.Second, 10), flow.Breaker(flow.BreakerPolicy{}))
	ledger := flow.New("ledger", flow.Breaker(flow.BreakerPolicy{MinCalls: 3, OpenFor: time.Hour}), flow.NoRetryBudget())
	transfer := activities.New("bank-transfer", func(ctx context.Context, account string) (string, error) {
		select {
		case <-b.answer:
			return "transferred to " + account, nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}, policy.MaxAttempts(3)).Calls(payments, nil)
	post := activities.New("post-ledger", func(ctx context.Context, day string) (string, error) {
		return "", errors.New("ledger: 503 Service Unavailable")
	}, policy.MaxAttempts(20), policy.Constant(50*time.Millisecond)).Calls(ledger, nil)
	b.payout = sdk.NewWorkflow("bank-payout", func(ctx context.Context, account string) (string, error) {
		return sdk.Execute(ctx, transfer, account)
	})
	b.report = sdk.NewWorkflow("ledger-report", func(ctx context.Context, day string) (string, error) {
		return sdk.Execute(ctx, post, day)
	})
	w, err := runtime.NewWorker(s.pool, runtime.Config{Schema: s.schema, Label: "bank-worker-1", LeaseTTL: 5 * time.Second,
		HeartbeatInterval: time.Second, PollInterval: 20 * time.Millisecond, Logger: discard})
	if err != nil {
		s.t.Fatal(err)
	}
	if err := w.Register(b.payout, b.report); err != nil {
		s.t.Fatal(err)
	}
	if err := w.Start(context.WithoutCancel(s.t.Context())); err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() {
		close(b.answer)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := w.Shutdown(ctx); err != nil {
			s.t.Errorf("bank worker: Shutdown: %v", err)
		}
	})
	return b
}

// until polls a scalar query of the shop's schema until it answers want.
func (s *shop) until(want, query string, args ...any) {
	s.t.Helper()
	q := strings.ReplaceAll(query, "{schema}", pgx.Identifier{s.schema}.Sanitize())
	deadline := time.Now().Add(30 * time.Second)
	for {
		var got string
		if err := s.pool.QueryRow(s.t.Context(), q, args...).Scan(&got); err != nil {
			s.t.Fatalf("%s: %v", q, err)
		}
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%s answers %q after 30s, want %q", q, got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestUI_DownstreamsShowWhatWaitsAndAPersonChangesTheLimits: the bank's API
// takes one payout at a time, so of three payouts one is in flight and two
// wait; the ledger fails until its breaker opens. At 1280×800 the
// Downstreams page says so without scrolling sideways; the engineer opens
// payments, raises its concurrency with a note, opens its breaker by hand,
// and reads both in its history; a waiting run says what it waits on.
func TestUI_DownstreamsShowWhatWaitsAndAPersonChangesTheLimits(t *testing.T) {
	t.Parallel()
	s := newShop(t)
	bk := s.newBank()
	ctx := t.Context()
	var waiting []string
	for i, account := range []string{"supplier-7", "supplier-8", "supplier-9"} {
		r, err := sdk.Start(ctx, s.client, bk.payout, account)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			s.until("1", `SELECT coalesce((SELECT in_use::text FROM {schema}.downstream_status WHERE name = 'payments'), '')`)
		} else {
			waiting = append(waiting, r.ID.String())
		}
	}
	s.until("2", `SELECT waiting::text FROM {schema}.downstream_status WHERE name = 'payments'`)
	if _, err := sdk.Start(ctx, s.client, bk.report, "2026-12-01"); err != nil {
		t.Fatal(err)
	}
	s.until("open", `SELECT coalesce((SELECT breaker FROM {schema}.downstream_status WHERE name = 'ledger'), '')`)
	if _, err := s.pool.Exec(ctx, fmt.Sprintf(`SELECT %s.declare_downstream('mail-relay', '{"rate": 5, "rate_interval_ms": 1000, "burst": 1}', 'mail-worker-1')`,
		pgx.Identifier{s.schema}.Sanitize())); err != nil {
		t.Fatal(err)
	}

	for _, mode := range []string{"read-only", "write mode"} {
		b := s.browseWith(ui.Config{})
		if mode == "write mode" {
			b = s.browse()
		}
		b.open("downstreams")
		b.fits("the downstreams page (" + mode + ")")
		b.open("downstreams/payments")
		b.fits("the page of payments (" + mode + ")")
		b.open("runs/" + waiting[0])
		b.fits("a run waiting on payments (" + mode + ")")
	}

	b := s.browse()
	b.open("failures")
	b.followNav("Downstreams")
	b.checkNav()
	rows := b.texts(downstreamRow)
	if len(rows) != 3 || !strings.HasPrefix(rows[0], "ledger") || !strings.HasPrefix(rows[2], "payments") {
		t.Fatalf("the Downstreams page lists %q, want ledger, mail-relay and payments", rows)
	}
	for _, want := range []string{"concurrency 1, rate 50/1s burst 10", "1 / 1", "as declared by bank-worker-1", "closed"} {
		if !strings.Contains(rows[2], want) {
			t.Errorf("the payments row reads %q, want it to say %q", rows[2], want)
		}
	}
	if !strings.Contains(rows[0], "open") {
		t.Errorf("the ledger row reads %q, want its breaker open", rows[0])
	}
	b.screenshot("downstreams")

	// A run waiting on payments says so, and links to it.
	b.open("runs/" + waiting[0])
	if got := b.text(`[data-testid="waiting-for"]`); !strings.Contains(got, "waiting on downstream payments (concurrency), step 1") {
		t.Errorf("the waiting run says %q, want it waiting on payments (concurrency)", got)
	}
	b.waitFor(timeline)
	b.screenshot("run-waiting-limit")
	b.follow(`[data-testid="waiting-downstream"]`)
	if got := b.texts(waitingRunRow); len(got) != 2 || !strings.Contains(got[0], "concurrency") {
		t.Fatalf("payments lists the waiting runs %q, want the two", got)
	}

	// Raise the concurrency to 2, with a note: one more payout runs.
	b.do("clear the concurrency", chromedp.Clear(chromedp.CSS(setLimitsForm+` [name="concurrency"]`), chromedp.NodeVisible))
	b.fill(setLimitsForm+` [name="concurrency"]`, "2")
	b.fill(setLimitsForm+` [name="note"]`, "INC-12: the bank raised our quota")
	b.follow(`[data-testid="set-limits"]`)
	if got := b.text(`[data-testid="limits"]`); !strings.HasPrefix(got, "concurrency 2, rate 50/1s burst 10") {
		t.Errorf("after the change, the limits read %q", got)
	}
	if got := b.text(`tr[data-testid="limit-change-row"]`); !strings.Contains(got, "person") || !strings.Contains(got, "ui:token: INC-12: the bank raised our quota") {
		t.Errorf("the last limit change reads %q, want the person's with the note", got)
	}
	s.until("2", `SELECT in_use::text FROM {schema}.downstream_status WHERE name = 'payments'`)

	// Open the breaker by hand: it says so, and its history says why.
	b.fill(`form[data-testid="open-breaker-form"] [name="note"]`, "INC-13: the bank asked us to stop")
	b.follow(openBreakerBtn)
	if got := b.text(`[data-testid="breaker"]`); !strings.Contains(got, "open by hand") || !strings.Contains(got, "stays open until a person closes it") {
		t.Errorf("the breaker reads %q, want open by hand", got)
	}
	if got := b.text(`tr[data-testid="breaker-row"]`); !strings.Contains(got, "INC-13: the bank asked us to stop") {
		t.Errorf("the breaker's history reads %q", got)
	}
	b.fits("the page of payments, its breaker open by hand")
	b.screenshot("downstream")
}
