package enqueue

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// Item is one candidate input object. Listings and inventories fill in
// what they know; a key from a file or the command line has only Bucket
// and Key (Size -1).
type Item struct {
	Bucket       string
	Key          string
	VersionID    string
	ETag         string
	Size         int64 // -1: unknown
	LastModified time.Time
}

// stream is one ordered source of items: a prefix listing, one inventory
// data file, or the lines of a file. Every item has a position that sorts
// as a string in the order the stream yields it, so a run can resume after
// the last position it finished (the checkpoint's watermark).
type stream struct {
	id    string
	level bool // a one-level listing that spawns its sub-prefixes
	// list emits the stream's items whose position sorts after after, in
	// order. It may spawn more streams (sub-prefixes of a listing).
	list func(ctx context.Context, after string, emit func(pos string, it Item) error, spawn func(*stream)) error
}

// rowPos is the position of the n-th row or line: fixed width, so
// positions sort as numbers.
func rowPos(n int64) string { return fmt.Sprintf("%012d", n) }

// keyStream yields fixed keys (command-line arguments).
func keyStream(bucket string, keys []string) *stream {
	return &stream{id: "args", list: func(ctx context.Context, after string, emit func(string, Item) error, _ func(*stream)) error {
		for i, k := range keys {
			pos := rowPos(int64(i + 1))
			if pos <= after {
				continue
			}
			it, err := parseKeyLine(bucket, k)
			if err != nil {
				return fmt.Errorf("argument %d: %w", i+1, err)
			}
			if err := emit(pos, it); err != nil {
				return err
			}
		}
		return nil
	}}
}

// parseKeyLine reads "key" (in bucket) or "s3://bucket/key".
func parseKeyLine(bucket, line string) (Item, error) {
	if rest, ok := strings.CutPrefix(line, "s3://"); ok {
		b, k, ok := strings.Cut(rest, "/")
		if !ok || b == "" || k == "" {
			return Item{}, fmt.Errorf("%q is not s3://bucket/key", line)
		}
		return Item{Bucket: b, Key: k, Size: -1}, nil
	}
	if bucket == "" {
		return Item{}, fmt.Errorf("key %q without a bucket: give -bucket or write s3://bucket/key", line)
	}
	return Item{Bucket: bucket, Key: line, Size: -1}, nil
}

// lineStream yields one item per non-blank line of r: a key in bucket or
// an s3://bucket/key URL. A resumed run must be given the same lines.
func lineStream(id, bucket string, open func() (io.ReadCloser, error)) *stream {
	return &stream{id: id, list: func(ctx context.Context, after string, emit func(string, Item) error, _ func(*stream)) error {
		r, err := open()
		if err != nil {
			return err
		}
		defer r.Close()
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 64<<10)
		var n int64
		for sc.Scan() {
			n++
			line := strings.TrimRight(sc.Text(), "\r")
			if strings.TrimSpace(line) == "" {
				continue
			}
			pos := rowPos(n)
			if pos <= after {
				continue
			}
			it, err := parseKeyLine(bucket, line)
			if err != nil {
				return fmt.Errorf("%s line %d: %w", id, n, err)
			}
			if err := emit(pos, it); err != nil {
				return err
			}
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if err := sc.Err(); err != nil {
			return fmt.Errorf("read %s: %w", id, err)
		}
		return nil
	}}
}

// prefixStream lists bucket/prefix. With depth > 0 it lists one level
// (delimiter "/"): keys directly under prefix are its own items, and each
// common prefix becomes a stream of its own with depth-1, listed in
// parallel with the rest. With depth 0 it lists everything under prefix
// in one flat, paged listing. Positions are keys: S3 lists in byte order.
func prefixStream(api S3API, bucket, prefix string, depth int) *stream {
	if depth <= 0 {
		return &stream{id: "s3://" + bucket + "/" + prefix, list: func(ctx context.Context, after string, emit func(string, Item) error, _ func(*stream)) error {
			in := &s3.ListObjectsV2Input{Bucket: aws.String(bucket), Prefix: aws.String(prefix)}
			if after != "" {
				in.StartAfter = aws.String(after)
			}
			p := s3.NewListObjectsV2Paginator(api, in)
			for p.HasMorePages() {
				page, err := p.NextPage(ctx)
				if err != nil {
					return fmt.Errorf("list s3://%s/%s: %w", bucket, prefix, err)
				}
				for _, o := range page.Contents {
					k := aws.ToString(o.Key)
					if err := emit(k, listedItem(bucket, k, o.ETag, o.Size, o.LastModified)); err != nil {
						return err
					}
				}
			}
			return nil
		}}
	}
	return &stream{id: "s3://" + bucket + "/" + prefix + " (level)", level: true, list: func(ctx context.Context, after string, emit func(string, Item) error, spawn func(*stream)) error {
		p := s3.NewListObjectsV2Paginator(api, &s3.ListObjectsV2Input{Bucket: aws.String(bucket), Prefix: aws.String(prefix), Delimiter: aws.String("/")})
		for p.HasMorePages() {
			page, err := p.NextPage(ctx)
			if err != nil {
				return fmt.Errorf("list s3://%s/%s: %w", bucket, prefix, err)
			}
			for _, cp := range page.CommonPrefixes {
				spawn(prefixStream(api, bucket, aws.ToString(cp.Prefix), depth-1))
			}
			for _, o := range page.Contents {
				k := aws.ToString(o.Key)
				if k <= after {
					continue
				}
				if err := emit(k, listedItem(bucket, k, o.ETag, o.Size, o.LastModified)); err != nil {
					return err
				}
			}
		}
		return nil
	}}
}

func listedItem(bucket, key string, etag *string, size *int64, mod *time.Time) Item {
	it := Item{Bucket: bucket, Key: key, ETag: strings.Trim(aws.ToString(etag), `"`), Size: -1}
	if size != nil {
		it.Size = *size
	}
	if mod != nil {
		it.LastModified = *mod
	}
	return it
}

// manifest is the part of an S3 Inventory manifest.json that is read.
type manifest struct {
	SourceBucket      string `json:"sourceBucket"`
	DestinationBucket string `json:"destinationBucket"`
	FileFormat        string `json:"fileFormat"`
	FileSchema        string `json:"fileSchema"`
	Files             []struct {
		Key  string `json:"key"`
		Size int64  `json:"size"`
	} `json:"files"`
}

// inventoryStreams reads an S3 Inventory manifest and returns one stream
// per data file (gzip CSV), in the manifest's order.
func inventoryStreams(ctx context.Context, api S3API, manifestURL string) ([]*stream, error) {
	mb, mk, ok := strings.Cut(strings.TrimPrefix(manifestURL, "s3://"), "/")
	if !strings.HasPrefix(manifestURL, "s3://") || !ok || mk == "" {
		return nil, fmt.Errorf("inventory manifest %q is not s3://bucket/key/manifest.json", manifestURL)
	}
	obj, err := api.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(mb), Key: aws.String(mk)})
	if err != nil {
		return nil, fmt.Errorf("read inventory manifest %s: %w", manifestURL, err)
	}
	var m manifest
	err = json.NewDecoder(io.LimitReader(obj.Body, 64<<20)).Decode(&m)
	_ = obj.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("inventory manifest %s: %w", manifestURL, err)
	}
	if !strings.EqualFold(m.FileFormat, "CSV") {
		return nil, fmt.Errorf("inventory manifest %s: file format %q is not supported (only CSV; configure the inventory as CSV)", manifestURL, m.FileFormat)
	}
	cols, err := inventoryColumns(m.FileSchema)
	if err != nil {
		return nil, fmt.Errorf("inventory manifest %s: %w", manifestURL, err)
	}
	dataBucket := mb
	if b := strings.TrimPrefix(m.DestinationBucket, "arn:aws:s3:::"); b != "" {
		dataBucket = b
	}
	var out []*stream
	for _, f := range m.Files {
		out = append(out, inventoryFile(api, dataBucket, f.Key, cols))
	}
	return out, nil
}

// inventoryCols are the indexes of the columns a row is read from; -1
// where the inventory does not have the column.
type inventoryCols struct {
	bucket, key, version, latest, deleteMarker, size, modified, etag int
}

func inventoryColumns(schema string) (inventoryCols, error) {
	c := inventoryCols{-1, -1, -1, -1, -1, -1, -1, -1}
	for i, name := range strings.Split(schema, ",") {
		switch strings.TrimSpace(name) {
		case "Bucket":
			c.bucket = i
		case "Key":
			c.key = i
		case "VersionId":
			c.version = i
		case "IsLatest":
			c.latest = i
		case "IsDeleteMarker":
			c.deleteMarker = i
		case "Size":
			c.size = i
		case "LastModifiedDate":
			c.modified = i
		case "ETag":
			c.etag = i
		}
	}
	if c.bucket < 0 || c.key < 0 {
		return c, fmt.Errorf("file schema %q lacks Bucket or Key", schema)
	}
	return c, nil
}

// inventoryFile streams the rows of one gzip CSV data file. Keys in
// inventory CSV files are URL-encoded. Delete markers and versions that
// are not the latest are left out.
func inventoryFile(api S3API, bucket, key string, cols inventoryCols) *stream {
	return &stream{id: "s3://" + bucket + "/" + key, list: func(ctx context.Context, after string, emit func(string, Item) error, _ func(*stream)) error {
		obj, err := api.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
		if err != nil {
			return fmt.Errorf("read inventory file s3://%s/%s: %w", bucket, key, err)
		}
		defer obj.Body.Close()
		zr, err := gzip.NewReader(obj.Body)
		if err != nil {
			return fmt.Errorf("inventory file s3://%s/%s: %w", bucket, key, err)
		}
		r := csv.NewReader(zr)
		r.FieldsPerRecord = -1
		r.ReuseRecord = true
		var n int64
		for {
			rec, err := r.Read()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return fmt.Errorf("inventory file s3://%s/%s: %w", bucket, key, err)
			}
			n++
			pos := rowPos(n)
			if pos <= after {
				continue
			}
			it, keep, err := inventoryRow(rec, cols)
			if err != nil {
				return fmt.Errorf("inventory file s3://%s/%s row %d: %w", bucket, key, n, err)
			}
			if !keep {
				// Still a position, so the watermark can pass it.
				it = Item{}
			}
			if err := emit(pos, it); err != nil {
				return err
			}
		}
	}}
}

func inventoryRow(rec []string, c inventoryCols) (Item, bool, error) {
	get := func(i int) string {
		if i < 0 || i >= len(rec) {
			return ""
		}
		return rec[i]
	}
	if get(c.deleteMarker) == "true" || get(c.latest) == "false" {
		return Item{}, false, nil
	}
	k, err := url.QueryUnescape(get(c.key))
	if err != nil {
		return Item{}, false, fmt.Errorf("key %q: %w", get(c.key), err)
	}
	it := Item{Bucket: get(c.bucket), Key: k, VersionID: get(c.version), ETag: strings.Trim(get(c.etag), `"`), Size: -1}
	if it.Bucket == "" || it.Key == "" {
		return Item{}, false, errors.New("row without bucket or key")
	}
	if s := get(c.size); s != "" {
		if it.Size, err = strconv.ParseInt(s, 10, 64); err != nil {
			return Item{}, false, fmt.Errorf("size %q: %w", s, err)
		}
	}
	if s := get(c.modified); s != "" {
		if it.LastModified, err = time.Parse(time.RFC3339, s); err != nil {
			return Item{}, false, fmt.Errorf("last modified %q: %w", s, err)
		}
	}
	return it, true, nil
}
