package terraform

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/hashicorp/hcl/v2/hclwrite"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/function"
	"github.com/zclconf/go-cty/cty/function/stdlib"
)

// module is the parsed .tf files of one directory.
type module struct {
	dir    string
	bodies []*hclsyntax.Body
	src    map[string][]byte
}

func tfFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(".", func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".tf") {
			files = append(files, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 20 {
		t.Fatalf("found only %d .tf files", len(files))
	}
	return files
}

func load(t *testing.T, dir string) *module {
	t.Helper()
	m := &module{dir: dir, src: map[string][]byte{}}
	p := hclparse.NewParser()
	matches, _ := filepath.Glob(filepath.Join(dir, "*.tf"))
	if len(matches) == 0 {
		t.Fatalf("no .tf files in %s", dir)
	}
	for _, f := range matches {
		file, diags := p.ParseHCLFile(f)
		if diags.HasErrors() {
			t.Fatalf("%s: %s", f, diags.Error())
		}
		m.bodies = append(m.bodies, file.Body.(*hclsyntax.Body))
		m.src[f] = file.Bytes
	}
	return m
}

func modules(t *testing.T) map[string]*module {
	out := map[string]*module{}
	dirs, _ := filepath.Glob("modules/*")
	dirs = append(dirs, "examples/complete")
	for _, d := range dirs {
		out[d] = load(t, d)
	}
	return out
}

// blocks returns top-level blocks of a type with the given labels (a
// prefix of them).
func (m *module) blocks(typ string, labels ...string) []*hclsyntax.Block {
	var out []*hclsyntax.Block
	for _, b := range m.bodies {
		for _, bl := range b.Blocks {
			if bl.Type == typ && len(bl.Labels) >= len(labels) && slices.Equal(bl.Labels[:len(labels)], labels) {
				out = append(out, bl)
			}
		}
	}
	return out
}

// local is the expression of the module's local name, failing the test
// where no locals block has it.
func (m *module) local(t *testing.T, name string) hclsyntax.Expression {
	t.Helper()
	for _, lb := range m.blocks("locals") {
		if a, ok := lb.Body.Attributes[name]; ok {
			return a.Expr
		}
	}
	t.Fatalf("no local %s", name)
	return nil
}

func (m *module) one(t *testing.T, typ string, labels ...string) *hclsyntax.Block {
	t.Helper()
	bs := m.blocks(typ, labels...)
	if len(bs) != 1 {
		t.Fatalf("%s: %d %s %v blocks, want 1", m.dir, len(bs), typ, labels)
	}
	return bs[0]
}

// nested returns the child blocks of a type, looking through dynamic
// blocks to their content.
func nested(b *hclsyntax.Block, typ string) []*hclsyntax.Block {
	var out []*hclsyntax.Block
	for _, c := range b.Body.Blocks {
		switch {
		case c.Type == typ:
			out = append(out, c)
		case c.Type == "dynamic" && len(c.Labels) == 1 && c.Labels[0] == typ:
			for _, cc := range c.Body.Blocks {
				if cc.Type == "content" {
					out = append(out, cc)
				}
			}
		}
	}
	return out
}

func attr(b *hclsyntax.Block, name string) hclsyntax.Expression {
	if a, ok := b.Body.Attributes[name]; ok {
		return a.Expr
	}
	return nil
}

// literal evaluates an expression that needs no variables.
func literal(t *testing.T, e hclsyntax.Expression) cty.Value {
	t.Helper()
	if e == nil {
		return cty.NilVal
	}
	v, diags := e.Value(nil)
	if diags.HasErrors() {
		return cty.NilVal
	}
	return v
}

func str(t *testing.T, e hclsyntax.Expression) string {
	v := literal(t, e)
	if v == cty.NilVal || !v.IsKnown() || v.IsNull() || v.Type() != cty.String {
		return ""
	}
	return v.AsString()
}

func strs(t *testing.T, e hclsyntax.Expression) ([]string, bool) {
	v := literal(t, e)
	if v == cty.NilVal || !v.IsKnown() || v.IsNull() || !(v.Type().IsTupleType() || v.Type().IsListType()) {
		return nil, false
	}
	var out []string
	for it := v.ElementIterator(); it.Next(); {
		_, ev := it.Element()
		if ev.Type() != cty.String {
			return nil, false
		}
		out = append(out, ev.AsString())
	}
	return out, true
}

// refs returns the traversals an expression refers to, as "a.b.c".
func refs(e hclsyntax.Expression) []string {
	var out []string
	for _, tr := range e.Variables() {
		var parts []string
		for _, s := range tr {
			switch s := s.(type) {
			case hcl.TraverseRoot:
				parts = append(parts, s.Name)
			case hcl.TraverseAttr:
				parts = append(parts, s.Name)
			}
		}
		out = append(out, strings.Join(parts, "."))
	}
	return out
}

func refersTo(e hclsyntax.Expression, prefix string) bool {
	for _, r := range refs(e) {
		if strings.HasPrefix(r, prefix) {
			return true
		}
	}
	return false
}

func TestFormatted(t *testing.T) {
	for _, f := range tfFiles(t) {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(hclwrite.Format(src), src) {
			t.Errorf("%s is not formatted: run make tf-fmt", f)
		}
	}
}

func TestVariablesTypedAndDescribed(t *testing.T) {
	n := 0
	for dir, m := range modules(t) {
		for _, v := range m.blocks("variable") {
			n++
			if attr(v, "type") == nil {
				t.Errorf("%s: variable %q has no type", dir, v.Labels[0])
			}
			if str(t, attr(v, "description")) == "" {
				t.Errorf("%s: variable %q has no description", dir, v.Labels[0])
			}
		}
		for _, o := range m.blocks("output") {
			if str(t, attr(o, "description")) == "" {
				t.Errorf("%s: output %q has no description", dir, o.Labels[0])
			}
		}
	}
	if n < 40 {
		t.Errorf("only %d variables found", n)
	}
}

func TestIMDSv2AndEncryptedRootVolume(t *testing.T) {
	m := load(t, "modules/fleet")
	lt := m.one(t, "resource", "aws_launch_template")
	md := nested(lt, "metadata_options")
	if len(md) != 1 || str(t, attr(md[0], "http_tokens")) != "required" {
		t.Fatal("launch template does not require IMDSv2 (metadata_options.http_tokens = \"required\")")
	}
	for _, bdm := range nested(lt, "block_device_mappings") {
		for _, ebs := range nested(bdm, "ebs") {
			if v := literal(t, attr(ebs, "encrypted")); v != cty.True {
				t.Error("root volume is not encrypted")
			}
		}
	}
	// Pinned when Terraform plans (tests/fleet.tftest.hcl checks the
	// value): resolve:ssm: would let EC2 pick whatever AMI the parameter
	// names at each launch, so a fleet could mix AMIs nobody applied.
	if e := lt.Body.Attributes["image_id"].Expr; !refersTo(e, "local.ami_id") || strings.Contains(string(e.Range().SliceBytes(m.src["modules/fleet/main.tf"])), "resolve:ssm:") {
		t.Error("the AMI is not pinned in the launch template")
	}
}

// Actions for which AWS offers no resource-level permissions, so "*" is
// the only valid resource. Each must be explained next to its statement.
var starResourceAllowed = map[string]bool{
	// Describe calls have no resource-level permissions.
	"autoscaling:DescribeAutoScalingInstances": true,
	"cloudwatch:PutMetricData":                 true,
	"ecr:GetAuthorizationToken":                true,
	"ssmmessages:CreateControlChannel":         true,
	"ssmmessages:CreateDataChannel":            true,
	"ssmmessages:OpenControlChannel":           true,
	"ssmmessages:OpenDataChannel":              true,
}

// A key policy's resource is always "*" (the key itself), and its one
// wildcard action is AWS's default statement for the account's root:
// it hands the decision to the account's IAM policies and grants nothing
// by itself.
func checkKeyPolicyStatement(t *testing.T, m *module, doc string, st *hclsyntax.Block) {
	t.Helper()
	if res, ok := strs(t, attr(st, "resources")); !ok || !slices.Equal(res, []string{"*"}) {
		t.Errorf("modules/kms %s: a key policy statement's resource is the key (\"*\"), not %v", doc, res)
	}
	actions, _ := strs(t, attr(st, "actions"))
	root := false
	for _, p := range nested(st, "principals") {
		ids := attr(p, "identifiers")
		src := string(ids.Range().SliceBytes(m.src[ids.Range().Filename]))
		root = str(t, attr(p, "type")) == "AWS" && strings.HasSuffix(src, `:iam::${local.account}:root"]`)
	}
	for _, a := range actions {
		if strings.Contains(a, "*") && (a != "kms:*" || !root || len(nested(st, "condition")) != 0) {
			t.Errorf("modules/kms %s: wildcard action %q outside the account's own statement", doc, a)
		}
	}
}

func TestIAMNoWildcards(t *testing.T) {
	checked := 0
	for dir, m := range modules(t) {
		for _, doc := range m.blocks("data", "aws_iam_policy_document") {
			for _, st := range nested(doc, "statement") {
				checked++
				if dir == "modules/kms" {
					checkKeyPolicyStatement(t, m, doc.Labels[1], st)
					continue
				}
				effect := str(t, attr(st, "effect"))
				actions, ok := strs(t, attr(st, "actions"))
				if !ok {
					t.Errorf("%s %s: actions must be a literal list", dir, doc.Labels[1])
					continue
				}
				conds := nested(st, "condition")
				for _, a := range actions {
					if !strings.Contains(a, "*") {
						continue
					}
					// The one exception: deny everything over plain HTTP.
					if effect != "Deny" || len(conds) != 1 || str(t, attr(conds[0], "variable")) != "aws:SecureTransport" {
						t.Errorf("%s %s: wildcard action %q", dir, doc.Labels[1], a)
					}
				}
				res, literalRes := strs(t, attr(st, "resources"))
				if literalRes && slices.Contains(res, "*") && effect == "Allow" {
					for _, a := range actions {
						if !starResourceAllowed[a] {
							t.Errorf("%s %s: action %s on resource \"*\"", dir, doc.Labels[1], a)
						}
					}
					if slices.Contains(actions, "cloudwatch:PutMetricData") && len(conds) == 0 {
						t.Errorf("%s: PutMetricData must be scoped to a namespace by condition", dir)
					}
				}
				if attr(st, "resources") == nil {
					// Trust policies name principals, not resources.
					if effect != "Allow" || !slices.Contains(actions, "sts:AssumeRole") && !slices.Contains(actions, "sts:AssumeRoleWithWebIdentity") {
						t.Errorf("%s %s: statement without resources", dir, doc.Labels[1])
					}
				}
			}
		}
	}
	if checked < 10 {
		t.Fatalf("only %d policy statements checked", checked)
	}
}

func TestWorkerRoleGrantsExactlyWhatTheWorkerDoes(t *testing.T) {
	doc := load(t, "modules/iam").one(t, "data", "aws_iam_policy_document", "worker")
	shared := load(t, "modules/worker-policy").one(t, "data", "aws_iam_policy_document", "this")
	if !refersTo(attr(doc, "source_policy_documents"), "module.policy.json") {
		t.Fatal("the instance role's policy does not include the worker-policy module's")
	}
	var got []string
	for _, st := range append(nested(doc, "statement"), nested(shared, "statement")...) {
		a, _ := strs(t, attr(st, "actions"))
		got = append(got, a...)
	}
	sort.Strings(got)
	got = slices.Compact(got)
	want := []string{
		"autoscaling:CompleteLifecycleAction", "autoscaling:DescribeAutoScalingInstances", "autoscaling:RecordLifecycleActionHeartbeat", "autoscaling:SetInstanceHealth", "autoscaling:SetInstanceProtection",
		"cloudwatch:PutMetricData",
		"ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage", "ecr:BatchImportUpstreamImage", "ecr:CreateRepository", "ecr:GetAuthorizationToken", "ecr:GetDownloadUrlForLayer",
		"kms:Decrypt", "kms:GenerateDataKey",
		"logs:CreateLogStream", "logs:PutLogEvents",
		"s3:DeleteObject", "s3:GetObject", "s3:GetObjectVersion", "s3:ListBucket", "s3:PutObject", "s3:PutObjectTagging",
		"sqs:ChangeMessageVisibility", "sqs:DeleteMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl", "sqs:ReceiveMessage",
	}
	if !slices.Equal(got, want) {
		t.Errorf("worker role actions changed:\n got %v\nwant %v", got, want)
	}
	for _, st := range nested(doc, "statement") {
		a, _ := strs(t, attr(st, "actions"))
		if (slices.Contains(a, "autoscaling:CompleteLifecycleAction") || slices.Contains(a, "autoscaling:SetInstanceProtection")) &&
			!refersTo(attr(st, "resources"), "local.asg_arns") {
			t.Error("lifecycle and protection actions are not scoped to the worker's own group and its canary")
		}
		if slices.Contains(a, "s3:ListBucket") && len(nested(st, "condition")) == 0 {
			t.Error("ListBucket is not limited to the worker's prefixes")
		}
	}
}

func TestQueuesEncryptedWithDLQ(t *testing.T) {
	m := load(t, "modules/queues")
	queues := m.blocks("resource", "aws_sqs_queue")
	if len(queues) != 2 {
		t.Fatalf("%d aws_sqs_queue resources, want main and dlq", len(queues))
	}
	for _, q := range queues {
		if attr(q, "sqs_managed_sse_enabled") == nil || attr(q, "kms_master_key_id") == nil {
			t.Errorf("queue %s does not set both SSE-SQS and the KMS key choice", q.Labels[1])
		}
	}
	main := m.one(t, "resource", "aws_sqs_queue", "main")
	rp := attr(main, "redrive_policy")
	if rp == nil || !refersTo(rp, "aws_sqs_queue.dlq") || !refersTo(rp, "var.max_receive_count") {
		t.Error("work queues do not redrive to their DLQ after max_receive_count")
	}
	dlq := m.one(t, "resource", "aws_sqs_queue", "dlq")
	if !refersTo(attr(main, "for_each"), "var.queues") || !refersTo(attr(dlq, "for_each"), "var.queues") {
		t.Error("queues and DLQs must be created per entry of var.queues")
	}
	if !refersTo(attr(main, "visibility_timeout_seconds"), "local.visibility_timeout") {
		t.Error("visibility timeout is not tied to the worker's job time")
	}
	// Every other queue in the project is one of these.
	for dir, mm := range modules(t) {
		if dir != "modules/queues" && len(mm.blocks("resource", "aws_sqs_queue")) > 0 {
			t.Errorf("%s creates queues outside the queues module", dir)
		}
	}
}

func TestBucketsEncryptedPrivateTLSOnly(t *testing.T) {
	m := load(t, "modules/buckets")
	m.one(t, "resource", "aws_s3_bucket", "this")
	for _, typ := range []string{"aws_s3_bucket_server_side_encryption_configuration", "aws_s3_bucket_public_access_block", "aws_s3_bucket_policy", "aws_s3_bucket_lifecycle_configuration"} {
		r := m.one(t, "resource", typ)
		if !refersTo(attr(r, "for_each"), "aws_s3_bucket.this") {
			t.Errorf("%s is not applied to every bucket", typ)
		}
	}
	sse := m.one(t, "resource", "aws_s3_bucket_server_side_encryption_configuration")
	for _, rule := range nested(sse, "rule") {
		for _, d := range nested(rule, "apply_server_side_encryption_by_default") {
			if str(t, attr(d, "sse_algorithm")) != "aws:kms" {
				t.Error("buckets are not SSE-KMS")
			}
		}
	}
	pab := m.one(t, "resource", "aws_s3_bucket_public_access_block")
	for _, k := range []string{"block_public_acls", "block_public_policy", "ignore_public_acls", "restrict_public_buckets"} {
		if literal(t, attr(pab, k)) != cty.True {
			t.Errorf("public access block: %s is not true", k)
		}
	}
	lc := m.one(t, "resource", "aws_s3_bucket_lifecycle_configuration")
	found := false
	for _, r := range nested(lc, "rule") {
		if str(t, attr(r, "id")) == "expire-error-records" {
			found = true
		}
	}
	if !found {
		t.Error("no lifecycle rule for error records")
	}
}

func TestNotificationsOnlyFromTheBucket(t *testing.T) {
	m := load(t, "modules/notifications")
	doc := m.one(t, "data", "aws_iam_policy_document", "queue")
	st := nested(doc, "statement")
	if len(st) != 1 {
		t.Fatalf("%d statements in the queue policy", len(st))
	}
	a, _ := strs(t, attr(st[0], "actions"))
	if !slices.Equal(a, []string{"sqs:SendMessage"}) {
		t.Errorf("queue policy actions %v", a)
	}
	var sourceArn bool
	for _, c := range nested(st[0], "condition") {
		if str(t, attr(c, "variable")) == "aws:SourceArn" && refersTo(attr(c, "values"), "var.bucket_arn") {
			sourceArn = true
		}
	}
	if !sourceArn {
		t.Error("queue policy does not restrict senders to the bucket (aws:SourceArn)")
	}
	n := m.one(t, "resource", "aws_s3_bucket_notification")
	qs := nested(n, "queue")
	if len(qs) != 1 || !refersTo(attr(qs[0], "filter_prefix"), "var.filter_prefix") || !refersTo(attr(qs[0], "filter_suffix"), "queue.value") {
		t.Error("notifications do not apply the prefix and suffix filters")
	}
}

// fleetVars are the fleet module's variables its locals depend on.
type fleetVars struct {
	queues     []string
	weights    map[string]float64
	spot       bool
	types      []string // default g6e.xlarge
	jobsPerGPU int64    // default 16
	capped     []string // floor_capped_queues
	minGPUs    int64    // min_gpus
	target     int64    // backlog_per_gpu_target, default 100
	warmPool   bool     // a warm pool: the group counts instances
}

// fleetLocals evaluates the fleet module's scaling locals for the given
// variables.
func fleetLocals(t *testing.T, m *module, fv fleetVars) *hcl.EvalContext {
	t.Helper()
	names := make([]cty.Value, len(fv.queues))
	for i, q := range fv.queues {
		names[i] = cty.StringVal(q)
	}
	if len(fv.types) == 0 {
		fv.types = []string{"g6e.xlarge"}
	}
	if fv.jobsPerGPU == 0 {
		fv.jobsPerGPU = 16
	}
	tv := make([]cty.Value, len(fv.types))
	for i, ty := range fv.types {
		tv[i] = cty.StringVal(ty)
	}
	weights := map[string]cty.Value{}
	for q, w := range fv.weights {
		weights[q] = cty.NumberFloatVal(w)
	}
	wv := cty.MapValEmpty(cty.Number)
	if len(weights) > 0 {
		wv = cty.MapVal(weights)
	}
	if fv.target == 0 {
		fv.target = 100
	}
	capped := cty.ListValEmpty(cty.String)
	if len(fv.capped) > 0 {
		cv := make([]cty.Value, len(fv.capped))
		for i, q := range fv.capped {
			cv[i] = cty.StringVal(q)
		}
		capped = cty.ListVal(cv)
	}
	ctx := &hcl.EvalContext{
		Variables: map[string]cty.Value{"var": cty.ObjectVal(map[string]cty.Value{
			"queue_names":            cty.TupleVal(names),
			"queue_weights":          wv,
			"jobs_per_gpu":           cty.NumberIntVal(fv.jobsPerGPU),
			"instance_types":         cty.TupleVal(tv),
			"spot":                   cty.ObjectVal(map[string]cty.Value{"enabled": cty.BoolVal(fv.spot)}),
			"warm_pool":              cty.ObjectVal(map[string]cty.Value{"enabled": cty.BoolVal(fv.warmPool)}),
			"floor_capped_queues":    capped,
			"min_gpus":               cty.NumberIntVal(fv.minGPUs),
			"backlog_per_gpu_target": cty.NumberIntVal(fv.target),
		})},
		Functions: map[string]function.Function{"join": stdlib.JoinFunc, "flatten": stdlib.FlattenFunc, "lookup": stdlib.LookupFunc, "contains": stdlib.ContainsFunc},
	}
	locals := map[string]cty.Value{}
	// In dependency order; the locals are spread over several files.
	for _, name := range []string{"gpus_per_instance", "weighted", "capacity_unit", "weights", "queue_ids", "term", "floor_cap", "visible_terms", "visible_expr",
		"from_zero_expr", "inflight_expr", "gpus_expr", "cap_expr", "per_gpu_expr"} {
		found := false
		for _, lb := range m.blocks("locals") {
			if a, ok := lb.Body.Attributes[name]; ok {
				ctx.Variables["local"] = cty.ObjectVal(locals)
				v, diags := a.Expr.Value(ctx)
				if diags.HasErrors() {
					t.Fatalf("local.%s: %s", name, diags.Error())
				}
				locals[name] = v
				found = true
			}
		}
		if !found {
			t.Fatalf("the fleet module has no local.%s", name)
		}
	}
	ctx.Variables["local"] = cty.ObjectVal(locals)
	return ctx
}

// The target tracking policy's metrics: visible and in-flight messages of
// each queue, and the group's in-service count. What the expression makes
// of them is TestBacklogMetricMath's.
func TestBacklogPerGPUTargetTracking(t *testing.T) {
	m := load(t, "modules/fleet")
	pol := m.one(t, "resource", "aws_autoscaling_policy", "backlog_per_gpu")
	if str(t, attr(pol, "policy_type")) != "TargetTrackingScaling" {
		t.Fatal("backlog policy is not target tracking")
	}
	spec := nested(nested(pol, "target_tracking_configuration")[0], "customized_metric_specification")[0]
	metricNames := map[string]string{} // id pattern → metric name
	returned := 0
	for _, mb := range nested(spec, "metrics") {
		if attr(mb, "expression") != nil {
			if refersTo(attr(mb, "expression"), "local.per_gpu_expr") && literal(t, attr(mb, "return_data")) == cty.True {
				returned++
			}
			continue
		}
		id := string(attr(mb, "id").Range().SliceBytes(m.src["modules/fleet/scaling.tf"]))
		for _, ms := range nested(mb, "metric_stat") {
			for _, met := range nested(ms, "metric") {
				metricNames[id] = str(t, attr(met, "metric_name"))
			}
		}
	}
	if returned != 1 {
		t.Error("the policy does not return local.per_gpu_expr")
	}
	want := map[string]string{
		`"visible${metrics.value}"`:  "ApproximateNumberOfMessagesVisible",
		`"inflight${metrics.value}"`: "ApproximateNumberOfMessagesNotVisible",
		`"desired"`:                  "GroupDesiredCapacity", // desired GPUs: a weighted group's is in GPUs
	}
	for id, name := range want {
		if metricNames[id] != name {
			t.Errorf("metric %s is %q, want %s (all: %v)", id, metricNames[id], name, metricNames)
		}
	}
	asg := m.one(t, "resource", "aws_autoscaling_group", "this")
	if em, _ := strs(t, attr(asg, "enabled_metrics")); !slices.Contains(em, "GroupDesiredCapacity") || !slices.Contains(em, "GroupInServiceCapacity") {
		t.Error("the group does not publish GroupDesiredCapacity and GroupInServiceCapacity")
	}
	main := string(m.src["modules/fleet/main.tf"])
	if !strings.Contains(main, "weighted_capacity = tostring(local.gpus_per_instance[override.value])") {
		t.Error("mixed instances are not weighted by their GPUs")
	}
}

// Every g6e size is allowed, with its GPU count; other families are not.
func TestInstanceTypesAreG6eWithTheirGPUs(t *testing.T) {
	m := load(t, "modules/fleet")
	gpus := fleetLocals(t, m, fleetVars{queues: []string{"live"}}).Variables["local"].GetAttr("gpus_per_instance")
	want := map[string]int64{"g6e.xlarge": 1, "g6e.16xlarge": 1, "g6e.12xlarge": 4, "g6e.24xlarge": 4, "g6e.48xlarge": 8}
	for ty, n := range want {
		if v := gpus.GetAttr(ty); !v.Equals(cty.NumberIntVal(n)).True() {
			t.Errorf("%s: %v GPUs, want %d", ty, v.GoString(), n)
		}
	}
	v := m.one(t, "variable", "instance_types")
	var cond hclsyntax.Expression
	for _, val := range nested(v, "validation") {
		cond = attr(val, "condition")
	}
	for types, ok := range map[string]bool{"g6e.xlarge": true, "g6e.12xlarge,g6e.48xlarge": true, "g6e.24xlarge": true, "p5.48xlarge": false, "g6e.xlarge,g5.xlarge": false} {
		var list []cty.Value
		for ty := range strings.SplitSeq(types, ",") {
			list = append(list, cty.StringVal(ty))
		}
		ctx := &hcl.EvalContext{
			Variables: map[string]cty.Value{"var": cty.ObjectVal(map[string]cty.Value{"instance_types": cty.TupleVal(list)})},
			Functions: map[string]function.Function{"contains": stdlib.ContainsFunc, "length": stdlib.LengthFunc, "alltrue": alltrue},
		}
		got, diags := cond.Value(ctx)
		if diags.HasErrors() {
			t.Fatal(diags.Error())
		}
		if got.True() != ok {
			t.Errorf("instance_types %s accepted = %v, want %v", types, got.True(), ok)
		}
		if _, listed := want[strings.Split(types, ",")[0]]; ok && !listed && !gpus.Type().HasAttribute(strings.Split(types, ",")[0]) {
			t.Errorf("%s is accepted but has no GPU count", types)
		}
	}
}

// alltrue as Terraform has it (the HCL stdlib does not).
var alltrue = function.New(&function.Spec{
	Params: []function.Parameter{{Name: "list", Type: cty.List(cty.Bool)}},
	Type:   function.StaticReturnType(cty.Bool),
	Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
		for it := args[0].ElementIterator(); it.Next(); {
			if _, v := it.Element(); !v.True() {
				return cty.False, nil
			}
		}
		return cty.True, nil
	},
})

func TestScaleFromZero(t *testing.T) {
	m := load(t, "modules/fleet")
	pol := m.one(t, "resource", "aws_autoscaling_policy", "scale_from_zero")
	if str(t, attr(pol, "policy_type")) != "StepScaling" {
		t.Error("scale-from-zero is not a step policy")
	}
	// Setting an exact capacity could shrink a busy fleet on a late data
	// point; adding capacity never lowers it.
	if str(t, attr(pol, "adjustment_type")) != "ChangeInCapacity" {
		t.Error("scale-from-zero does not add capacity (ExactCapacity can lower it)")
	}
	alarm := m.one(t, "resource", "aws_cloudwatch_metric_alarm", "scale_from_zero")
	if !refersTo(attr(alarm, "alarm_actions"), "aws_autoscaling_policy.scale_from_zero.arn") {
		t.Error("the scale-from-zero alarm does not trigger the step policy")
	}
	// What the alarm's expression decides is TestScaleFromZeroAlarmMath's.
	watched := ""
	for _, q := range nested(alarm, "metric_query") {
		if id := attr(q, "id"); id != nil && str(t, id) == "desired" {
			for _, met := range nested(q, "metric") {
				watched = str(t, attr(met, "metric_name"))
			}
		}
	}
	if watched != "GroupDesiredCapacity" {
		t.Errorf("scale-from-zero's desired is %q: it does not watch desired capacity", watched)
	}
	if v := literal(t, attr(m.one(t, "variable", "min_gpus"), "default")); v == cty.NilVal || !v.Equals(cty.Zero).True() {
		t.Error("min_gpus does not default to 0")
	}
}

// The hooks exist before the group's first instance launches (the
// group's initial_lifecycle_hook), and their settings are owned by their
// own resources afterwards: initial_lifecycle_hook forces a new group when
// it changes, so it must be in ignore_changes, or editing the drain
// timeout would destroy the fleet.
func TestLifecycleHooks(t *testing.T) {
	m := load(t, "modules/fleet")
	asg := m.one(t, "resource", "aws_autoscaling_group", "this")
	initial := map[string]bool{}
	for _, h := range nested(asg, "initial_lifecycle_hook") {
		initial[str(t, attr(h, "lifecycle_transition"))] = true
	}
	if !initial["autoscaling:EC2_INSTANCE_LAUNCHING"] || !initial["autoscaling:EC2_INSTANCE_TERMINATING"] {
		t.Errorf("the group's first instances (and its warm pool) launch before the hooks exist: initial hooks %v", initial)
	}
	var ignored []string
	for _, lc := range nested(asg, "lifecycle") {
		if e := attr(lc, "ignore_changes"); e != nil {
			for _, v := range e.(*hclsyntax.TupleConsExpr).Exprs {
				ignored = append(ignored, hcl.ExprAsKeyword(v))
			}
		}
	}
	if !slices.Contains(ignored, "initial_lifecycle_hook") {
		t.Error("a change to initial_lifecycle_hook would replace the group: it must be in ignore_changes")
	}
	drain := m.one(t, "resource", "aws_autoscaling_lifecycle_hook", "drain")
	if str(t, attr(drain, "lifecycle_transition")) != "autoscaling:EC2_INSTANCE_TERMINATING" {
		t.Error("no termination lifecycle hook")
	}
	if !refersTo(attr(drain, "heartbeat_timeout"), "local.drain_hook_timeout") || !refersTo(m.local(t, "drain_hook_timeout"), "var.drain_timeout_seconds") {
		t.Error("hook timeout is not tied to the drain timeout")
	}
	launch := m.one(t, "resource", "aws_autoscaling_lifecycle_hook", "launch")
	if str(t, attr(launch, "lifecycle_transition")) != "autoscaling:EC2_INSTANCE_LAUNCHING" || str(t, attr(launch, "default_result")) != "ABANDON" {
		t.Error("no launch lifecycle hook that abandons instances whose stack never came up")
	}
}

func TestWarmPoolAndSpotMutuallyExclusive(t *testing.T) {
	asg := load(t, "modules/fleet").one(t, "resource", "aws_autoscaling_group", "this")
	var cond hclsyntax.Expression
	for _, lc := range nested(asg, "lifecycle") {
		for _, pc := range nested(lc, "precondition") {
			if refersTo(attr(pc, "condition"), "var.warm_pool") && refersTo(attr(pc, "condition"), "var.spot") {
				cond = attr(pc, "condition")
			}
		}
	}
	if cond == nil {
		t.Fatal("no precondition relating warm_pool and spot")
	}
	for _, c := range []struct{ warm, spot, ok bool }{{false, false, true}, {true, false, true}, {false, true, true}, {true, true, false}} {
		ctx := &hcl.EvalContext{Variables: map[string]cty.Value{"var": cty.ObjectVal(map[string]cty.Value{
			"warm_pool": cty.ObjectVal(map[string]cty.Value{"enabled": cty.BoolVal(c.warm)}),
			"spot":      cty.ObjectVal(map[string]cty.Value{"enabled": cty.BoolVal(c.spot)}),
		})}}
		v, diags := cond.Value(ctx)
		if diags.HasErrors() {
			t.Fatal(diags.Error())
		}
		if v.True() != c.ok {
			t.Errorf("warm pool %v, spot %v: precondition %v, want %v", c.warm, c.spot, v.True(), c.ok)
		}
	}
}

func TestNoHardcodedAccountsRegionsOrSecrets(t *testing.T) {
	account := regexp.MustCompile(`\b\d{12}\b`)
	region := regexp.MustCompile(`\b(us|eu|ap|sa|ca|me|af|il)-(north|south|east|west|central|northeast|southeast)-\d\b`)
	secret := regexp.MustCompile(`(?i)(AKIA[0-9A-Z]{16}|secret_key|password\s*=)`)
	files, _ := filepath.Glob("modules/*/*")
	for _, f := range files {
		b, _ := os.ReadFile(f)
		for _, re := range []*regexp.Regexp{account, region, secret} {
			if loc := re.Find(b); loc != nil {
				t.Errorf("%s hard-codes %q", f, loc)
			}
		}
	}
}

func TestFleetShipsTheProjectComposeFile(t *testing.T) {
	if _, err := os.Stat(filepath.Join("modules/fleet", "../../../docker-compose.yml")); err != nil {
		t.Fatalf("fleet module's default compose file: %v", err)
	}
	tpl, err := os.ReadFile("modules/fleet/user_data.sh.tftpl")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"fleetscribe-worker mps up", "complete-lifecycle-action", "record-lifecycle-action-heartbeat", "EXCLUSIVE_PROCESS"} {
		if !bytes.Contains(tpl, []byte(want)) {
			t.Errorf("user data lacks %q", want)
		}
	}
}

// The drain service is installed before anything that can fail at boot,
// and the stack starts from a service that runs on every boot (a warm-pool
// instance boots again when it leaves the pool).
func TestUserDataInstallsServicesBeforeStarting(t *testing.T) {
	tpl, err := os.ReadFile("modules/fleet/user_data.sh.tftpl")
	if err != nil {
		t.Fatal(err)
	}
	s := string(tpl)
	enable := strings.Index(s, "systemctl enable fleetscribe-drain.service fleetscribe.service")
	up := strings.LastIndex(s, "systemctl start fleetscribe.service")
	if enable < 0 || up < enable {
		t.Error("services are not enabled before the stack is started")
	}
	if i := strings.Index(s, "fleetscribe-worker mps up"); i < 0 || i > strings.Index(s, "START\n") {
		t.Error("the stack (worker mps up) starts outside the boot service")
	}
}

// A Running warm pool would take jobs while instances wait in the pool,
// and g6e instances cannot hibernate.
func TestWarmPoolStateIsStopped(t *testing.T) {
	v := load(t, "modules/fleet").one(t, "variable", "warm_pool")
	var cond hclsyntax.Expression
	for _, val := range nested(v, "validation") {
		if c := attr(val, "condition"); refersTo(c, "var.warm_pool.pool_state") {
			cond = c
		}
	}
	if cond == nil {
		t.Fatal("warm_pool.pool_state has no validation")
	}
	for state, ok := range map[string]bool{"Stopped": true, "Hibernated": false, "Running": false} {
		ctx := &hcl.EvalContext{
			Variables: map[string]cty.Value{"var": cty.ObjectVal(map[string]cty.Value{
				"warm_pool": cty.ObjectVal(map[string]cty.Value{"pool_state": cty.StringVal(state)}),
			})},
			Functions: map[string]function.Function{"contains": stdlib.ContainsFunc},
		}
		got, diags := cond.Value(ctx)
		if diags.HasErrors() {
			t.Fatal(diags.Error())
		}
		if got.True() != ok {
			t.Errorf("pool_state %s accepted = %v, want %v", state, got.True(), ok)
		}
	}
}

// Scheduled actions own min_size during the bulk window: an apply inside
// the window must not reset the floor.
func TestApplyKeepsTheScheduledFloor(t *testing.T) {
	asg := load(t, "modules/fleet").one(t, "resource", "aws_autoscaling_group", "this")
	var ignored []string
	for _, lc := range nested(asg, "lifecycle") {
		if e := attr(lc, "ignore_changes"); e != nil {
			for _, v := range e.(*hclsyntax.TupleConsExpr).Exprs {
				ignored = append(ignored, hcl.ExprAsKeyword(v))
			}
		}
	}
	for _, want := range []string{"desired_capacity", "min_size"} {
		if !slices.Contains(ignored, want) {
			t.Errorf("ignore_changes lacks %s (have %v)", want, ignored)
		}
	}
}

// A variable validation that refers to another variable needs Terraform
// 1.9; older releases reject the configuration at init. Every directory
// with one must say so in required_version, or an operator on 1.5-1.8 gets
// a parse error instead of the version it needs.
func TestRequiredVersionCoversValidations(t *testing.T) {
	lower := regexp.MustCompile(`>=\s*(\d+)\.(\d+)`)
	for dir, m := range modules(t) {
		var cross []string
		for _, v := range m.blocks("variable") {
			for _, val := range nested(v, "validation") {
				for _, r := range refs(attr(val, "condition")) {
					if strings.HasPrefix(r, "var.") && strings.Split(r, ".")[1] != v.Labels[0] {
						cross = append(cross, v.Labels[0]+" -> "+r)
					}
				}
			}
		}
		tf := m.one(t, "terraform")
		req := str(t, attr(tf, "required_version"))
		mm := lower.FindStringSubmatch(req)
		if mm == nil {
			t.Errorf("%s: required_version %q has no lower bound", dir, req)
			continue
		}
		major, minor := mm[1], mm[2]
		atLeast19 := major != "1" || len(minor) > 1 || minor >= "9"
		if len(cross) > 0 && !atLeast19 {
			t.Errorf("%s: validations refer to other variables (%s) but required_version is %q: they need >= 1.9", dir, strings.Join(cross, ", "), req)
		}
	}
}

// The Kubernetes pods' role (pod-role, the Helm chart's service account)
// and the instance role (iam) grant the worker's data access from one
// document, the worker-policy module's, given the same inputs: neither
// writes a statement of its own about queues, buckets or keys. The
// pod-role module's terraform test compares the rendered JSON of both.
func TestPodRoleSharesTheWorkerPolicy(t *testing.T) {
	if p := sharedPolicyProblems(t, "modules/iam", "modules/pod-role"); len(p) > 0 {
		t.Fatal(strings.Join(p, "\n"))
	}
	// The mutation: the pod role grants a read of its own.
	dir := t.TempDir()
	for _, f := range []string{"main.tf", "variables.tf", "outputs.tf", "versions.tf"} {
		b, err := os.ReadFile(filepath.Join("modules/pod-role", f))
		if err != nil {
			t.Fatal(err)
		}
		if f == "main.tf" {
			b = append(b, "\ndata \"aws_iam_policy_document\" \"extra\" {\n  statement {\n    actions   = [\"s3:GetObject\"]\n    resources = [\"*\"]\n  }\n}\n"...)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if p := sharedPolicyProblems(t, dir); len(p) == 0 {
		t.Fatal("a pod role with a statement of its own passed")
	}
	fmt.Println("INVARIANT pod_role_policy_is_the_instance_roles mutation=\"a statement of the pod role's own\" caught")
}

func sharedPolicyProblems(t *testing.T, dirs ...string) []string {
	var out []string
	inputs := []string{"queue_arns", "input_bucket_arn", "input_prefixes", "output_bucket_arn", "output_prefix", "kms_key_arns", "model_repository_s3_uri", "model_kms_key_arn"}
	for _, dir := range dirs {
		m := load(t, dir)
		call := m.one(t, "module", "policy")
		if src := str(t, attr(call, "source")); src != "../worker-policy" {
			out = append(out, fmt.Sprintf("%s: module policy from %q", dir, src))
		}
		for _, in := range inputs {
			if !refersTo(attr(call, in), "var."+in) {
				out = append(out, fmt.Sprintf("%s: the policy's %s is not the module's own var.%s", dir, in, in))
			}
		}
		for _, doc := range m.blocks("data", "aws_iam_policy_document") {
			for _, st := range nested(doc, "statement") {
				actions, _ := strs(t, attr(st, "actions"))
				for _, a := range actions {
					if strings.HasPrefix(a, "s3:") || strings.HasPrefix(a, "sqs:") || strings.HasPrefix(a, "kms:") {
						out = append(out, fmt.Sprintf("%s %s: grants %s itself, beside the shared worker policy", dir, doc.Labels[1], a))
					}
				}
			}
		}
		if bs := m.blocks("resource", "aws_iam_role_policy", "this"); len(bs) == 1 && !refersTo(attr(bs[0], "policy"), "module.policy.json") {
			out = append(out, dir+": the pods' role policy is not the worker-policy module's")
		}
	}
	return out
}

// The group launches the launch template version this apply made, never
// $Latest or $Default (a version no apply reviewed, or one the console
// set), with or without spot.
func TestGroupLaunchesTheVersionItMade(t *testing.T) {
	m := load(t, "modules/fleet")
	asg := m.one(t, "resource", "aws_autoscaling_group", "this")
	var versions []hclsyntax.Expression
	for _, lt := range nested(asg, "launch_template") {
		versions = append(versions, attr(lt, "version"))
	}
	for _, mip := range nested(asg, "mixed_instances_policy") {
		for _, lt := range nested(mip, "launch_template") {
			for _, spec := range nested(lt, "launch_template_specification") {
				versions = append(versions, attr(spec, "version"))
			}
		}
	}
	if len(versions) != 2 {
		t.Fatalf("%d launch template versions in the group, want 2 (on-demand and spot)", len(versions))
	}
	// The fleet's version: the release pinned in launch_template_version,
	// else the newest, the one this apply made (never $Latest, which would
	// reach the fleet at its next launch, refresh or not).
	for _, v := range versions {
		if !refersTo(v, "local.fleet_version") {
			t.Error("the group launches a version other than local.fleet_version")
		}
	}
	fv := m.local(t, "fleet_version")
	call, ok := fv.(*hclsyntax.FunctionCallExpr)
	if !ok || call.Name != "coalesce" || len(call.Args) != 2 || !refersTo(call.Args[0], "var.launch_template_version") ||
		!refersTo(call.Args[1], "aws_launch_template.this.latest_version") {
		t.Error("local.fleet_version is not coalesce(var.launch_template_version, aws_launch_template.this.latest_version)")
	}
}
