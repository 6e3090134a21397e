// s3copy moves backup files between the backup sidecar (or the restore Job) and an
// S3-compatible bucket: the operator runs it through pods/exec, one command a call.
//
//	s3copy [flags] check               the bucket exists and the keys may read it
//	s3copy [flags] put FILE KEY        upload FILE, its sha256 as object metadata
//	s3copy [flags] get KEY FILE        download to FILE.part, check the sha256, rename
//	s3copy [flags] stat KEY            size and sha256 of an object
//	s3copy [flags] cat KEY             an object's content (a manifest) on stdout, sha256 checked
//	s3copy [flags] list PREFIX         keys and sizes under PREFIX
//	s3copy [flags] delete KEY...       remove objects (a missing one is no error)
//
// Answers are one JSON object a line on stdout. A failure is one line on stderr and an exit
// code the operator reads: 3 the bucket does not exist, 4 the keys are refused, 5 no keys
// (the Secret is not mounted), 6 a sha256 mismatch, 1 anything else.
package main

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Exit codes the operator maps to condition reasons.
const (
	exitFailed      = 1
	exitUsage       = 2
	exitNoBucket    = 3
	exitAccess      = 4
	exitNoKeys      = 5
	exitDigest      = 6
	digestMetadata  = "Sha256"
	accessKeyFile   = "accessKeyID"
	secretKeyFile   = "secretAccessKey"
	defaultDeadline = 30 * time.Minute
)

type failure struct {
	code int
	err  error
}

func (f *failure) Error() string { return f.err.Error() }

func fail(code int, format string, args ...any) error {
	return &failure{code, fmt.Errorf(format, args...)}
}

type options struct {
	endpoint    string
	bucket      string
	region      string
	caFile      string
	credentials string
}

func main() {
	var opts options
	flags := flag.NewFlagSet("s3copy", flag.ContinueOnError)
	flags.StringVar(&opts.endpoint, "endpoint", "", "S3 endpoint URL (https://host[:port] or http://...)")
	flags.StringVar(&opts.bucket, "bucket", "", "bucket")
	flags.StringVar(&opts.region, "region", "", "region (empty: the store's default)")
	flags.StringVar(&opts.caFile, "ca-file", "", "PEM CA bundle for the endpoint's TLS (empty: the system's)")
	flags.StringVar(&opts.credentials, "credentials", "", "directory holding the files "+accessKeyFile+" and "+secretKeyFile)
	if err := flags.Parse(os.Args[1:]); err != nil {
		os.Exit(exitUsage)
	}
	ctx, cancel := context.WithTimeout(context.Background(), defaultDeadline)
	err := run(ctx, opts, flags.Args(), os.Stdout)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "s3copy:", err)
		var f *failure
		if errors.As(err, &f) {
			os.Exit(f.code)
		}
		os.Exit(exitFailed)
	}
}

func run(ctx context.Context, opts options, args []string, out io.Writer) error {
	if len(args) == 0 {
		return fail(exitUsage, "no command (check, put, get, stat, list, delete)")
	}
	client, err := connect(opts)
	if err != nil {
		return err
	}
	s := store{client, opts.bucket, json.NewEncoder(out)}
	command, rest := args[0], args[1:]
	want := map[string]int{"check": 0, "put": 2, "get": 2, "stat": 1, "cat": 1, "list": 1}
	if n, known := want[command]; known && len(rest) != n {
		return fail(exitUsage, "%s takes %d arguments, got %d", command, n, len(rest))
	}
	switch command {
	case "check":
		return s.check(ctx)
	case "put":
		return s.put(ctx, rest[0], rest[1])
	case "get":
		return s.get(ctx, rest[0], rest[1])
	case "stat":
		return s.stat(ctx, rest[0])
	case "cat":
		return s.cat(ctx, rest[0], out)
	case "list":
		return s.list(ctx, rest[0])
	case "delete":
		return s.remove(ctx, rest)
	}
	return fail(exitUsage, "unknown command %q", command)
}

func connect(opts options) (*minio.Client, error) {
	if opts.endpoint == "" || opts.bucket == "" {
		return nil, fail(exitUsage, "--endpoint and --bucket are required")
	}
	endpoint, err := url.Parse(opts.endpoint)
	if err != nil || endpoint.Host == "" || (endpoint.Scheme != "https" && endpoint.Scheme != "http") {
		return nil, fail(exitUsage, "endpoint %q is not an http(s)://host[:port] URL", opts.endpoint)
	}
	access, err := readKey(opts.credentials, accessKeyFile)
	if err != nil {
		return nil, err
	}
	secret, err := readKey(opts.credentials, secretKeyFile)
	if err != nil {
		return nil, err
	}
	transport, err := minio.DefaultTransport(endpoint.Scheme == "https")
	if err != nil {
		return nil, err
	}
	if opts.caFile != "" {
		pem, err := os.ReadFile(opts.caFile)
		if err != nil {
			return nil, fail(exitFailed, "CA bundle: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fail(exitFailed, "CA bundle %s holds no PEM certificate", opts.caFile)
		}
		transport.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return minio.New(endpoint.Host, &minio.Options{
		Creds:     credentials.NewStaticV4(access, secret, ""),
		Secure:    endpoint.Scheme == "https",
		Region:    opts.region,
		Transport: http.RoundTripper(transport),
	})
}

func readKey(dir, name string) (string, error) {
	if dir == "" {
		return "", fail(exitNoKeys, "no --credentials directory")
	}
	data, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return "", fail(exitNoKeys, "the key %s is not mounted (%v): does the Secret exist and hold it?", name, err)
	}
	key := strings.TrimSpace(string(data))
	if key == "" {
		return "", fail(exitNoKeys, "the key %s is empty", name)
	}
	return key, nil
}

type store struct {
	client *minio.Client
	bucket string
	out    *json.Encoder
}

// classify turns the store's answer into the exit code the operator reads.
func (s store) classify(err error, what string) error {
	answer := minio.ToErrorResponse(err)
	switch answer.Code {
	case "NoSuchBucket":
		return fail(exitNoBucket, "bucket %q does not exist (%s)", s.bucket, what)
	case "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch":
		return fail(exitAccess, "the store refused the keys for bucket %q (%s: %s)", s.bucket, what, answer.Code)
	}
	return fail(exitFailed, "%s: %v", what, err)
}

func (s store) check(ctx context.Context) error {
	// A listing, not BucketExists: it needs the keys to be valid, and answers NoSuchBucket.
	for object := range s.client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{MaxKeys: 1}) {
		if object.Err != nil {
			return s.classify(object.Err, "list")
		}
		break
	}
	return s.out.Encode(map[string]any{"bucket": s.bucket})
}

func digestOf(path string) (string, int64, error) {
	file, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer file.Close()
	hash := sha256.New()
	size, err := io.Copy(hash, file)
	return hex.EncodeToString(hash.Sum(nil)), size, err
}

func (s store) put(ctx context.Context, path, key string) error {
	started := time.Now()
	digest, size, err := digestOf(path)
	if err != nil {
		return fail(exitFailed, "%v", err)
	}
	file, err := os.Open(path)
	if err != nil {
		return fail(exitFailed, "%v", err)
	}
	defer file.Close()
	_, err = s.client.PutObject(ctx, s.bucket, key, file, size, minio.PutObjectOptions{
		ContentType:  "application/octet-stream",
		UserMetadata: map[string]string{digestMetadata: digest},
	})
	if err != nil {
		return s.classify(err, "put "+key)
	}
	return s.out.Encode(map[string]any{
		"key": key, "size": size, "sha256": digest, "seconds": time.Since(started).Seconds(),
	})
}

func (s store) get(ctx context.Context, key, path string) error {
	started := time.Now()
	info, err := s.client.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{})
	if err != nil {
		return s.classify(err, "stat "+key)
	}
	if err := s.client.FGetObject(ctx, s.bucket, key, path+".part", minio.GetObjectOptions{}); err != nil {
		return s.classify(err, "get "+key)
	}
	digest, size, err := digestOf(path + ".part")
	if err != nil {
		return fail(exitFailed, "%v", err)
	}
	if recorded := info.UserMetadata[digestMetadata]; recorded != digest {
		_ = os.Remove(path + ".part")
		return fail(exitDigest, "%s: sha256 %s, its metadata says %q: not used", key, digest, recorded)
	}
	if err := os.Rename(path+".part", path); err != nil {
		return fail(exitFailed, "%v", err)
	}
	return s.out.Encode(map[string]any{
		"key": key, "size": size, "sha256": digest, "seconds": time.Since(started).Seconds(),
	})
}

func (s store) stat(ctx context.Context, key string) error {
	info, err := s.client.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{})
	if err != nil {
		return s.classify(err, "stat "+key)
	}
	return s.out.Encode(map[string]any{
		"key": key, "size": info.Size, "sha256": info.UserMetadata[digestMetadata],
	})
}

// cat prints a small object (at most 1 MiB) once its sha256 matches its metadata.
func (s store) cat(ctx context.Context, key string, out io.Writer) error {
	object, err := s.client.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return s.classify(err, "get "+key)
	}
	defer object.Close()
	data, err := io.ReadAll(io.LimitReader(object, 1<<20))
	if err != nil {
		return s.classify(err, "get "+key)
	}
	info, err := object.Stat()
	if err != nil {
		return s.classify(err, "stat "+key)
	}
	sum := sha256.Sum256(data)
	if digest := hex.EncodeToString(sum[:]); info.UserMetadata[digestMetadata] != digest {
		return fail(exitDigest, "%s: sha256 %s, its metadata says %q", key, digest, info.UserMetadata[digestMetadata])
	}
	_, err = out.Write(data)
	return err
}

func (s store) list(ctx context.Context, prefix string) error {
	for object := range s.client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if object.Err != nil {
			return s.classify(object.Err, "list "+prefix)
		}
		if err := s.out.Encode(map[string]any{"key": object.Key, "size": object.Size}); err != nil {
			return err
		}
	}
	return nil
}

func (s store) remove(ctx context.Context, keys []string) error {
	for _, key := range keys {
		if err := s.client.RemoveObject(ctx, s.bucket, key, minio.RemoveObjectOptions{}); err != nil {
			return s.classify(err, "delete "+key)
		}
		if err := s.out.Encode(map[string]any{"deleted": key}); err != nil {
			return err
		}
	}
	return nil
}
