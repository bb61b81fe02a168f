package helm_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/fleetscribe/fleetscribe/lab/kit/golden"
)

// openValues are the values whose keys are the user's own (environment
// variables, annotations, Kubernetes objects and resource lists, the plan
// `worker mps helm` writes): the schema leaves them open. Every other
// object of values.yaml takes only its own keys, so a misspelt value is an
// error at install instead of a setting silently ignored.
var openValues = []string{
	"worker.env", "worker.resources", "triton.resources", "model.volume", "compileCache.volume",
	"serviceAccount.annotations", "nodeSelector", "tolerations", "affinity", "podAnnotations",
	"imagePullSecrets", "metrics.serviceMonitor.labels", "metrics.prometheusRule.labels",
	"metrics.dashboard.labels", "plan", "devicePluginConfig",
}

// schemaOf is the JSON schema of a value as values.yaml gives it.
func schemaOf(path string, v any) map[string]any {
	if slices.Contains(openValues, path) {
		return map[string]any{}
	}
	switch x := v.(type) {
	case map[string]any:
		props := map[string]any{}
		for k, sub := range x {
			p := k
			if path != "" {
				p = path + "." + k
			}
			props[k] = schemaOf(p, sub)
		}
		return map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	case []any:
		return map[string]any{"type": "array"}
	case bool:
		return map[string]any{"type": "boolean"}
	case float64, int, int64:
		return map[string]any{"type": "number"}
	case string:
		return map[string]any{"type": "string"}
	default: // null: any type
		return map[string]any{}
	}
}

// values.schema.json is values.yaml's keys and types, closed where the
// values are the chart's own.
func TestValuesSchemaIsCurrent(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(chart, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(b, &values); err != nil {
		t.Fatal(err)
	}
	s := schemaOf("", values)
	s["$schema"] = "https://json-schema.org/draft-07/schema#"
	s["title"] = "fleetscribe chart values (generated from values.yaml by deploy/helm's TestValuesSchemaIsCurrent)"
	out, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden.Check(t, filepath.Join(chart, "values.schema.json"), append(out, '\n'), *update, "make docs")
}

// A misspelt value is refused, naming it; an open value takes any key.
func TestValuesSchemaRefusesTypos(t *testing.T) {
	for _, c := range []struct {
		set, want string
	}{
		{"worker.jobTimeoutSecond=3600", "jobTimeoutSecond"},
		{"scaling.maxReplica=4", "maxReplica"},
		{"worker.jobsPerGPU=many", "jobsPerGPU"},
	} {
		if _, err := helmTemplate(t, "", c.set); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("--set %s: %v, want an error naming %s", c.set, err, c.want)
		}
	}
	if _, err := helmTemplate(t, "", "worker.env.FLEETSCRIBE_LOG_LEVEL=debug", "podAnnotations.team=asr"); err != nil {
		t.Errorf("open values refused: %v", err)
	}
}
