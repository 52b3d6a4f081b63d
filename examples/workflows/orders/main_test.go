package main

import (
	"bytes"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/tenurehq/tenure/internal/noleaks"
	"github.com/tenurehq/tenure/internal/pgtest"
	"github.com/tenurehq/tenure/sdk"
)

func TestMain(m *testing.M) { os.Exit(noleaks.Main(m)) }

func TestOrders_PaymentIsTakenAtMostOnceAndReconciled(t *testing.T) {
	var out bytes.Buffer
	o, err := run(t.Context(), &out, pgtest.URL(t), pgtest.Schema(t))
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	got := out.String()
	if o.happyErr != nil {
		t.Errorf("happy order: %v", o.happyErr)
	}
	var re *sdk.RunError
	if !errors.As(o.decErr, &re) || re.Reason != sdk.ReasonNonRetryable || re.Activity != "charge" {
		t.Errorf("declined order: %v, want a non_retryable failure of charge", o.decErr)
	}
	if o.cutErr != nil || o.chargeCallsForCutOff != 1 {
		t.Errorf("cut-off order: %v after %d charge calls; want success after exactly one", o.cutErr, o.chargeCallsForCutOff)
	}
	if !slices.Equal(o.confirmations, []string{"ada@example.com", "cy@example.com"}) {
		t.Errorf("confirmations sent to %v", o.confirmations)
	}
	for _, want := range []string{
		"Reconciled:true",
		"1    1       charge             lost       worker-a", // the attempt whose outcome nobody knows
		"2    1       find-payment       succeeded  worker-b",
		"record-order       succeeded",
		"send-confirmation  failed", "(jitter)", // the 421, retried after a full-jitter delay
		"open_failures", "go -C cmd/tenure run . --schema",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if t.Failed() {
		t.Log(got)
	}
}
