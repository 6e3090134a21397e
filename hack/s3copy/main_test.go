package main

// Against a real store: SeaweedFS's weed (WEED_BINARY, from hack/tools.sh env) started in a
// temporary directory on free ports. Without WEED_BINARY the test is skipped; make e2e-backup
// builds weed and sets it.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

const (
	testAccess = "test-access"
	testSecret = "test-secret-key"
	testBucket = "kcp-backups"
)

func freePort(t *testing.T) int {
	t.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close()
	return listener.Addr().(*net.TCPAddr).Port
}

// startWeed runs weed server -s3 with one identity and the bucket made; its endpoint URL.
func startWeed(t *testing.T) string {
	t.Helper()
	binary := os.Getenv("WEED_BINARY")
	if binary == "" {
		t.Skip("WEED_BINARY is not set (hack/tools.sh build seaweedfs; eval \"$(hack/tools.sh env)\")")
	}
	dir := t.TempDir()
	config := fmt.Sprintf(`{"identities":[{"name":"t","credentials":[{"accessKey":%q,"secretKey":%q}],`+
		`"actions":["Admin","Read","Write","List","Tagging"]}]}`, testAccess, testSecret)
	if err := os.WriteFile(filepath.Join(dir, "s3.json"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	ports := map[string]int{}
	for _, name := range []string{"master", "volume", "filer", "s3"} {
		// weed listens on port+10000 for gRPC too: keep both below 65536.
		for ports[name] = freePort(t); ports[name] > 55000; ports[name] = freePort(t) {
		}
	}
	command := exec.Command(binary, "-logtostderr", "server", "-dir="+dir, "-ip=127.0.0.1",
		"-ip.bind=127.0.0.1", "-s3", "-s3.config="+filepath.Join(dir, "s3.json"),
		fmt.Sprintf("-master.port=%d", ports["master"]), fmt.Sprintf("-volume.port=%d", ports["volume"]),
		fmt.Sprintf("-filer.port=%d", ports["filer"]), fmt.Sprintf("-s3.port=%d", ports["s3"]),
		"-s3.port.iceberg=0", "-s3.port.lance=0", "-master.volumeSizeLimitMB=64", "-volume.max=4")
	command.Env = append(os.Environ(), "TMPDIR="+dir)
	var logs bytes.Buffer
	command.Stdout, command.Stderr = &logs, &logs
	if err := command.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = command.Process.Kill()
		_ = command.Wait()
		if t.Failed() {
			t.Logf("weed's log:\n%s", logs.String())
		}
	})
	endpoint := fmt.Sprintf("127.0.0.1:%d", ports["s3"])
	client, err := minio.New(endpoint, &minio.Options{Creds: credentials.NewStaticV4(testAccess, testSecret, "")})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = client.MakeBucket(ctx, testBucket, minio.MakeBucketOptions{})
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("weed did not make bucket %s within 90s: %v", testBucket, err)
		}
		time.Sleep(time.Second)
	}
	return "http://" + endpoint
}

func writeKeys(t *testing.T, access, secret string) string {
	t.Helper()
	dir := t.TempDir()
	for name, value := range map[string]string{accessKeyFile: access, secretKeyFile: secret} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(value+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// call runs one s3copy command; its JSON lines, or its error's exit code.
func call(t *testing.T, opts options, args ...string) ([]map[string]any, int) {
	t.Helper()
	var out bytes.Buffer
	err := run(context.Background(), opts, args, &out)
	if err != nil {
		var f *failure
		if errors.As(err, &f) {
			return nil, f.code
		}
		t.Fatalf("%v: %v", args, err)
	}
	var lines []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if line == "" {
			continue
		}
		var found map[string]any
		if err := json.Unmarshal([]byte(line), &found); err != nil {
			if args[0] == "cat" {
				return []map[string]any{{"text": out.String()}}, 0
			}
			t.Fatalf("%v answered %q", args, line)
		}
		lines = append(lines, found)
	}
	return lines, 0
}

func TestAgainstWeed(t *testing.T) {
	endpoint := startWeed(t)
	opts := options{endpoint: endpoint, bucket: testBucket, credentials: writeKeys(t, testAccess, testSecret)}
	dir := t.TempDir()
	content := bytes.Repeat([]byte("a snapshot "), 300000)
	sum := sha256.Sum256(content)
	digest := hex.EncodeToString(sum[:])
	snapshot := filepath.Join(dir, "root.db")
	if err := os.WriteFile(snapshot, content, 0o600); err != nil {
		t.Fatal(err)
	}
	key := "ns/root/root-20261207T110700Z.db"

	if _, code := call(t, opts, "check"); code != 0 {
		t.Fatalf("check exited %d", code)
	}
	put, code := call(t, opts, "put", snapshot, key)
	if code != 0 || put[0]["sha256"] != digest || int(put[0]["size"].(float64)) != len(content) {
		t.Fatalf("put: %v (exit %d)", put, code)
	}
	stat, _ := call(t, opts, "stat", key)
	if stat[0]["sha256"] != digest {
		t.Fatalf("stat: %v, want sha256 %s", stat, digest)
	}
	listed, _ := call(t, opts, "list", "ns/")
	if len(listed) != 1 || listed[0]["key"] != key {
		t.Fatalf("list: %v", listed)
	}
	fetched := filepath.Join(dir, "fetched.db")
	if got, code := call(t, opts, "get", key, fetched); code != 0 || got[0]["sha256"] != digest {
		t.Fatalf("get: %v (exit %d)", got, code)
	}
	if data, _ := os.ReadFile(fetched); !bytes.Equal(data, content) {
		t.Fatal("the downloaded file differs")
	}

	// An object whose content does not match its recorded sha256 is refused and not kept.
	client, err := minio.New(strings.TrimPrefix(endpoint, "http://"),
		&minio.Options{Creds: credentials.NewStaticV4(testAccess, testSecret, "")})
	if err != nil {
		t.Fatal(err)
	}
	tampered := "ns/root/tampered.db"
	_, err = client.PutObject(context.Background(), testBucket, tampered, bytes.NewReader([]byte("other")), 5,
		minio.PutObjectOptions{UserMetadata: map[string]string{digestMetadata: digest}})
	if err != nil {
		t.Fatal(err)
	}
	refused := filepath.Join(dir, "refused.db")
	if _, code := call(t, opts, "get", tampered, refused); code != exitDigest {
		t.Fatalf("get of a tampered object exited %d, want %d", code, exitDigest)
	}
	if _, err := os.Stat(refused); !os.IsNotExist(err) {
		t.Fatal("the tampered object was kept")
	}
	if _, err := os.Stat(refused + ".part"); !os.IsNotExist(err) {
		t.Fatal("the tampered object's part was kept")
	}

	// What the operator tells apart: no bucket, refused keys, no keys.
	noBucket := opts
	noBucket.bucket = "no-such-bucket"
	if _, code := call(t, noBucket, "check"); code != exitNoBucket {
		t.Fatalf("check of a missing bucket exited %d, want %d", code, exitNoBucket)
	}
	wrong := opts
	wrong.credentials = writeKeys(t, testAccess, "not-the-secret")
	if _, code := call(t, wrong, "check"); code != exitAccess {
		t.Fatalf("check with a wrong secret exited %d, want %d", code, exitAccess)
	}
	missing := opts
	missing.credentials = filepath.Join(dir, "not-mounted")
	if _, code := call(t, missing, "check"); code != exitNoKeys {
		t.Fatalf("check without keys exited %d, want %d", code, exitNoKeys)
	}

	if _, code := call(t, opts, "delete", key, tampered, "ns/root/never-there.db"); code != 0 {
		t.Fatalf("delete exited %d", code)
	}
	if listed, _ := call(t, opts, "list", "ns/"); len(listed) != 0 {
		t.Fatalf("left after delete: %v", listed)
	}
}
