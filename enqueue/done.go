package enqueue

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/fleetscribe/fleetscribe/contract"
	"github.com/fleetscribe/fleetscribe/internal/s3errs"
	"golang.org/x/sync/errgroup"
	"golang.org/x/time/rate"
)

// Skip-check modes.
const (
	CheckList = "list" // list the output prefix around each window of keys
	CheckHead = "head" // one HeadObject per key
)

// verdict is what the checker decides for one item.
type verdict int

const (
	vSend     verdict = iota
	vFiltered         // fails a size or time bound learned from HeadObject
	vDone             // its transcript exists
	vFailed           // could not be checked
)

// checker fills in metadata that filters or output keys need and finds
// items whose transcript already exists, with the worker's own KeysFor.
type checker struct {
	s3      S3API
	filter  Filter
	skip    bool // skip-if-done
	mode    string
	bucket  string // the worker's output bucket
	prefix  string // output prefix of the jobs
	model   string // model of the jobs
	heads   int    // HeadObject calls in flight at once
	limiter *rate.Limiter
	// versioned says, per input bucket, whether outputs are keyed by
	// version id, which a listing does not give.
	versioned map[string]bool
}

// outcome of one window item.
type checked struct {
	v   verdict
	err error
}

// check decides every item of a window. It never fails as a whole: an
// item that cannot be checked is vFailed with its error, unless ctx ended.
func (c *checker) check(ctx context.Context, items []Item) ([]checked, error) {
	out := make([]checked, len(items))
	// Inputs that need a HeadObject: metadata for a size/time filter, or
	// the tag (ETag or version) that names the output.
	var need []int
	for i, it := range items {
		if c.filter.needsMeta() && !c.filter.hasMeta(it) || c.skip && c.tagUnknown(it) {
			need = append(need, i)
		}
	}
	if err := c.parallel(ctx, need, func(ctx context.Context, i int) {
		it := &items[i]
		h, err := c.s3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(it.Bucket), Key: aws.String(it.Key), VersionId: optional(it.VersionID)})
		if err != nil {
			if s3errs.NotFound(err) {
				err = fmt.Errorf("s3://%s/%s does not exist", it.Bucket, it.Key)
			}
			out[i] = checked{v: vFailed, err: fmt.Errorf("head input: %w", err)}
			return
		}
		it.ETag = strings.Trim(aws.ToString(h.ETag), `"`)
		it.VersionID = aws.ToString(h.VersionId)
		it.Size = aws.ToInt64(h.ContentLength)
		if h.LastModified != nil {
			it.LastModified = *h.LastModified
		}
	}); err != nil {
		return nil, err
	}
	var todo []int
	for i, it := range items {
		switch {
		case out[i].v == vFailed:
		case c.filter.needsMeta() && !c.filter.matchMeta(it):
			out[i].v = vFiltered
		case c.skip:
			todo = append(todo, i)
		}
	}
	if len(todo) == 0 {
		return out, nil
	}
	keys := make([]string, len(items))
	for _, i := range todo {
		it := items[i]
		keys[i] = contract.KeysFor(c.prefix, contract.InputRef{Bucket: it.Bucket, Key: it.Key, ETag: it.ETag, VersionID: it.VersionID}, c.model).JSON
	}
	if c.mode == CheckList {
		var err error
		if todo, err = c.listCheck(ctx, todo, keys, out); err != nil {
			return nil, err
		}
	}
	err := c.parallel(ctx, todo, func(ctx context.Context, i int) {
		_, err := c.s3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(c.bucket), Key: aws.String(keys[i])})
		switch {
		case err == nil:
			out[i].v = vDone
		case !s3errs.NotFound(err):
			out[i] = checked{v: vFailed, err: fmt.Errorf("check for transcript: %w", err)}
		}
	})
	return out, err
}

// listCheck resolves output keys by listing the output bucket from each
// key not yet resolved: one call covers every key up to the last one it
// returns. It returns the indexes left for HeadObject: all of them once
// the listing turns out to cost more calls than a fiftieth of the keys
// (keys scattered far apart, such as hashed long keys).
func (c *checker) listCheck(ctx context.Context, todo []int, keys []string, out []checked) ([]int, error) {
	order := slices.Clone(todo)
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(keys[a], keys[b]) })
	budget := max(2, len(order)/50)
	next := 0
	for calls := 0; next < len(order); calls++ {
		if calls >= budget {
			return order[next:], nil
		}
		if err := c.wait(ctx); err != nil {
			return nil, err
		}
		// Every key left shares the prefix of the first and the last: the
		// narrowest listing that holds them all.
		first := keys[order[next]]
		page, err := c.s3.ListObjectsV2(ctx, &s3.ListObjectsV2Input{
			Bucket: aws.String(c.bucket), Prefix: aws.String(commonPrefix(first, keys[order[len(order)-1]])),
			StartAfter: aws.String(first[:len(first)-1]), // keys >= first
		})
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			// Fall back to HeadObject for what is left.
			return order[next:], nil
		}
		last := ""
		if n := len(page.Contents); n > 0 {
			last = aws.ToString(page.Contents[n-1].Key)
		}
		listed := make(map[string]bool, len(page.Contents))
		for _, o := range page.Contents {
			listed[aws.ToString(o.Key)] = true
		}
		truncated := aws.ToBool(page.IsTruncated)
		for next < len(order) {
			k := keys[order[next]]
			if truncated && k > last {
				break
			}
			if listed[k] {
				out[order[next]].v = vDone
			}
			next++
		}
	}
	return nil, nil
}

// commonPrefix returns the longest prefix of a and b, ending on a whole
// UTF-8 character.
func commonPrefix(a, b string) string {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	for n > 0 && n < len(a) && !utf8.RuneStart(a[n]) {
		n--
	}
	return a[:n]
}

// parallel runs fn for each index with at most c.heads at once, each
// after the rate limiter allows it.
func (c *checker) parallel(ctx context.Context, idx []int, fn func(context.Context, int)) error {
	if len(idx) == 0 {
		return nil
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(c.heads, 1))
	for _, i := range idx {
		if err := c.wait(gctx); err != nil {
			break
		}
		g.Go(func() error {
			fn(gctx, i)
			return nil
		})
	}
	_ = g.Wait()
	return ctx.Err()
}

func (c *checker) wait(ctx context.Context) error {
	if c.limiter == nil {
		return ctx.Err()
	}
	return c.limiter.Wait(ctx)
}

// tagUnknown reports whether the output key of it cannot be known yet:
// no ETag, or a versioned bucket and no version id.
func (c *checker) tagUnknown(it Item) bool {
	return it.ETag == "" && it.VersionID == "" || c.versioned[it.Bucket] && it.VersionID == ""
}

// detectVersioning asks S3 whether bucket keeps versions. Where it cannot
// say (no permission, an emulator without versioning), the bucket is
// taken as unversioned, which is right for any bucket never versioned.
func detectVersioning(ctx context.Context, api S3API, bucket string) (bool, error) {
	out, err := api.GetBucketVersioning(ctx, &s3.GetBucketVersioningInput{Bucket: aws.String(bucket)})
	if err != nil {
		return false, err
	}
	return out.Status == types.BucketVersioningStatusEnabled || out.Status == types.BucketVersioningStatusSuspended, nil
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return aws.String(s)
}
