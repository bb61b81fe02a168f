package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestUndoNeedsGroupAndVersion(t *testing.T) {
	for _, args := range [][]string{{}, {"redo"}, {"undo"}, {"undo", "-group", "g"}, {"undo", "-version", "3"}} {
		var out, errb bytes.Buffer
		if err := run(context.Background(), args, &out, &errb); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}

// The flags reach Auto Scaling: a group the endpoint does not know is named
// in the error.
func TestUndoAsksTheEndpointForTheGroup(t *testing.T) {
	var asked string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		asked = r.Form.Get("Action") + " " + r.Form.Get("AutoScalingGroupNames.member.1")
		w.Header().Set("Content-Type", "text/xml")
		_, _ = w.Write([]byte(`<DescribeAutoScalingGroupsResponse xmlns="http://autoscaling.amazonaws.com/doc/2011-01-01/"><DescribeAutoScalingGroupsResult><AutoScalingGroups/></DescribeAutoScalingGroupsResult></DescribeAutoScalingGroupsResponse>`))
	}))
	defer srv.Close()
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	var out, errb bytes.Buffer
	err := run(context.Background(), []string{"undo", "-group", "fleetscribe-prod", "-version", "3", "-aws-region", "us-east-1", "-autoscaling-endpoint", srv.URL}, &out, &errb)
	if err == nil || !strings.Contains(err.Error(), `"fleetscribe-prod"`) || asked != "DescribeAutoScalingGroups fleetscribe-prod" {
		t.Errorf("err = %v, asked %q", err, asked)
	}
}
