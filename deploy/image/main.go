// imagebuild writes the controller's image with no container daemon and no
// base image: one layer holding the static controller binary, the CA bundle,
// /etc/passwd and /etc/group naming the nonroot user (uid 65532), and the
// directories a distroless nonroot image has; as an OCI image layout and a
// docker-archive tarball. deploy/image/build runs it; see its --help.
//
// Reproducible: every tar entry, time and order is fixed here, the layer is
// gzipped by a compressor pinned in go.sum (not the Go toolchain's), and the
// CA bundle comes from a module pinned in go.mod, so the same binary and the
// same -epoch give the same digest on any machine.
package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	kgzip "github.com/klauspost/compress/gzip"
	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// The image's user: distroless' nonroot.
const (
	uid      = 65532
	entry    = "/shardcron"
	certFile = "/etc/ssl/certs/ca-certificates.crt"
)

// The image's environment and working directory, as distroless' nonroot
// images have them.
var (
	env = []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"SSL_CERT_FILE=" + certFile,
	}
	workingDir = "/home/nonroot"
)

func usage() {
	fmt.Fprint(os.Stderr, `Usage:
  imagebuild image -binary FILE -out DIR -epoch SECONDS -version V -revision R [-source URL] [-tag shardcron:dev]
      writes DIR/oci (an OCI image layout), DIR/shardcron-oci.tar (the same
      as an archive: kind load image-archive, docker load, crane push keep
      its digest) and DIR/shardcron-docker.tar (a docker-archive, for older
      docker load); prints the manifest digest, the config digest and the
      sizes
  imagebuild rootfs -out DIR -epoch SECONDS
      writes the image's files but the binary into DIR (deploy/Dockerfile's
      final stage copies them)
  imagebuild unpack -image PATH -to DIR
      writes the image's filesystem into DIR with its owners and modes (as a
      container runtime would), and prints its config (user, entrypoint, env)
      as JSON; PATH is an OCI layout directory or a docker-archive
  imagebuild list -image PATH
      prints one line per file of the image (type, mode, owner, size, sha256,
      path): two images with the same listing have the same filesystem
`)
}

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "image":
		err = imageCommand(os.Args[2:])
	case "rootfs":
		err = rootfsCommand(os.Args[2:])
	case "unpack":
		err = unpackCommand(os.Args[2:])
	case "list":
		err = listCommand(os.Args[2:])
	case "-h", "--help", "help":
		usage()
		return
	default:
		usage()
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "imagebuild %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

// file is one entry of the image's layer.
type file struct {
	name string // relative, no leading slash; directories end in '/'
	mode int64
	uid  int
	data []byte
	dir  bool
}

// files are the image's entries but the binary: distroless nonroot's users,
// groups and directories, and a CA bundle.
func files() ([]file, error) {
	ca, err := caBundle()
	if err != nil {
		return nil, err
	}
	dir := func(name string, mode int64, owner int) file {
		return file{name: name, mode: mode, uid: owner, dir: true}
	}
	text := func(name, content string) file {
		return file{name: name, mode: 0o644, data: []byte(content)}
	}
	return []file{
		dir("etc/", 0o755, 0),
		text("etc/group", "root:x:0:\nnobody:x:65534:\ntty:x:5:\nstaff:x:50:\nnonroot:x:65532:\n"),
		// glibc reads it for user and host lookups; files and DNS only,
		// which a static glibc has built in (no module to load).
		text("etc/nsswitch.conf", "passwd: files\ngroup: files\nhosts: files dns\n"),
		text("etc/passwd", "root:x:0:0:root:/root:/sbin/nologin\n"+
			"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n"+
			"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"),
		dir("etc/ssl/", 0o755, 0),
		dir("etc/ssl/certs/", 0o755, 0),
		{name: strings.TrimPrefix(certFile, "/"), mode: 0o644, data: ca},
		dir("home/", 0o755, 0),
		dir("home/nonroot/", 0o700, uid),
		dir("root/", 0o700, 0),
		dir("tmp/", 0o1777, 0),
	}, nil
}

// caBundle is the Mozilla root store as the pinned x509roots module has it,
// in PEM: the roots with a constraint PEM cannot carry (a distrust date)
// are left out.
func caBundle() ([]byte, error) {
	var out bytes.Buffer
	for root := range bundle.Roots() {
		if root.Constraint != nil {
			continue
		}
		if err := pem.Encode(&out, &pem.Block{Type: "CERTIFICATE", Bytes: root.Certificate}); err != nil {
			return nil, err
		}
	}
	if out.Len() == 0 {
		return nil, errors.New("the x509roots bundle has no root")
	}
	return out.Bytes(), nil
}

// layerTar is the layer: the entries in name order, every time the epoch,
// owners numeric.
func layerTar(entries []file, epoch time.Time) ([]byte, error) {
	sort.Slice(entries, func(i, j int) bool { return entries[i].name < entries[j].name })
	var out bytes.Buffer
	w := tar.NewWriter(&out)
	for _, f := range entries {
		header := &tar.Header{
			Name:    f.name,
			Mode:    f.mode,
			Uid:     f.uid,
			Gid:     f.uid,
			ModTime: epoch,
			Format:  tar.FormatPAX,
		}
		if f.dir {
			header.Typeflag = tar.TypeDir
		} else {
			header.Typeflag = tar.TypeReg
			header.Size = int64(len(f.data))
		}
		if err := w.WriteHeader(header); err != nil {
			return nil, err
		}
		if _, err := w.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// gzipped compresses with a fixed level and an empty header (no name, no
// time): the same bytes on every machine.
func gzipped(data []byte) ([]byte, error) {
	var out bytes.Buffer
	w, err := kgzip.NewWriterLevel(&out, kgzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(data); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

type imageFlags struct {
	binary, out, tag, version, revision, source string
	epoch                                       int64
}

func imageCommand(args []string) error {
	var f imageFlags
	flags := flag.NewFlagSet("image", flag.ContinueOnError)
	flags.StringVar(&f.binary, "binary", "", "the controller binary (static, stripped)")
	flags.StringVar(&f.out, "out", "", "the output directory")
	flags.StringVar(&f.tag, "tag", "shardcron:dev", "the docker-archive's tag")
	flags.StringVar(&f.version, "version", "", "the controller's version (org.opencontainers.image.version)")
	flags.StringVar(&f.revision, "revision", "", "the source revision (org.opencontainers.image.revision)")
	flags.StringVar(&f.source, "source", "", "the source repository's URL (org.opencontainers.image.source; none if empty)")
	flags.Int64Var(&f.epoch, "epoch", -1, "every time in the image, seconds since 1970 (SOURCE_DATE_EPOCH)")
	if err := flags.Parse(args); err != nil {
		return err
	}
	if f.binary == "" || f.out == "" || f.epoch < 0 || f.version == "" || f.revision == "" {
		return errors.New("-binary, -out, -epoch, -version and -revision are required")
	}
	tag, err := name.NewTag(f.tag)
	if err != nil {
		return fmt.Errorf("-tag: %w", err)
	}
	binary, err := os.ReadFile(f.binary)
	if err != nil {
		return err
	}
	img, uncompressed, err := build(binary, f)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(f.out, 0o755); err != nil {
		return err
	}
	if err := writeLayout(img, filepath.Join(f.out, "oci"), tag); err != nil {
		return err
	}
	err = atomically(filepath.Join(f.out, "shardcron-oci.tar"), func(path string) error {
		return tarDirectory(filepath.Join(f.out, "oci"), path, time.Unix(f.epoch, 0).UTC())
	})
	if err != nil {
		return err
	}
	err = atomically(filepath.Join(f.out, "shardcron-docker.tar"), func(path string) error {
		return tarball.WriteToFile(path, tag, img)
	})
	if err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	// Read back: the layout written holds this very image.
	written, err := readImage(filepath.Join(f.out, "oci"))
	if err != nil {
		return fmt.Errorf("reading the layout back: %w", err)
	}
	if back, err := written.Digest(); err != nil || back != digest {
		return fmt.Errorf("the layout holds %v (%v), not %v", back, err, digest)
	}
	config, err := img.ConfigName()
	if err != nil {
		return err
	}
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	compressed, err := layers[0].Size()
	if err != nil {
		return err
	}
	fmt.Printf("manifest %s\nconfig %s\nfilesystem_bytes %d\nlayer_gzip_bytes %d\n",
		digest, config, uncompressed, compressed)
	return nil
}

// build makes the image from the binary; also returns its filesystem's
// size (the layer uncompressed).
func build(binary []byte, f imageFlags) (v1.Image, int, error) {
	epoch := time.Unix(f.epoch, 0).UTC()
	entries, err := files()
	if err != nil {
		return nil, 0, err
	}
	entries = append(entries, file{name: strings.TrimPrefix(entry, "/"), mode: 0o755, data: binary})
	layerBytes, err := layerTar(entries, epoch)
	if err != nil {
		return nil, 0, err
	}
	compressed, err := gzipped(layerBytes)
	if err != nil {
		return nil, 0, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(compressed)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, 0, err
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	created := v1.Time{Time: epoch}
	img, err := mutate.Append(base, mutate.Addendum{
		Layer: layer,
		History: v1.History{
			Created:   created,
			CreatedBy: "deploy/image/build",
			Comment:   "shardcron " + f.version,
		},
	})
	if err != nil {
		return nil, 0, err
	}
	configFile, err := img.ConfigFile()
	if err != nil {
		return nil, 0, err
	}
	configFile = configFile.DeepCopy()
	configFile.Architecture = "amd64"
	configFile.OS = "linux"
	configFile.Created = created
	labels := map[string]string{
		"org.opencontainers.image.created":  epoch.Format(time.RFC3339),
		"org.opencontainers.image.licenses": "Apache-2.0",
		"org.opencontainers.image.revision": f.revision,
		"org.opencontainers.image.title":    "shardcron",
		"org.opencontainers.image.version":  f.version,
	}
	if f.source != "" {
		labels["org.opencontainers.image.source"] = f.source
	}
	configFile.Config = v1.Config{
		User:       fmt.Sprintf("%d:%d", uid, uid),
		Entrypoint: []string{entry},
		Env:        env,
		WorkingDir: workingDir,
		Labels:     labels,
	}
	img, err = mutate.ConfigFile(img, configFile)
	if err != nil {
		return nil, 0, err
	}
	return img, len(layerBytes), nil
}

// writeLayout writes a fresh OCI layout at dir (a layout is appended to,
// so an old one would keep its blobs and index entries).
func writeLayout(img v1.Image, dir string, tag name.Tag) error {
	partial := dir + ".partial"
	if err := os.RemoveAll(partial); err != nil {
		return err
	}
	path, err := layout.Write(partial, empty.Index)
	if err != nil {
		return err
	}
	// containerd names an imported image by its full reference.
	full := tag.Name()
	if tag.RegistryStr() == name.DefaultRegistry {
		full = fmt.Sprintf("docker.io/%s:%s", tag.RepositoryStr(), tag.TagStr())
	}
	err = path.AppendImage(img, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": tag.TagStr(),
		"io.containerd.image.name":          full,
	}))
	if err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	return os.Rename(partial, dir)
}

// atomically writes the file at path by write(path + ".partial"), then a
// rename: a reader never sees half of it.
func atomically(path string, write func(string) error) error {
	if err := write(path + ".partial"); err != nil {
		os.Remove(path + ".partial")
		return err
	}
	return os.Rename(path+".partial", path)
}

// tarDirectory writes dir's files (an OCI layout: directories and regular
// files) into a tar at path, in name order, owned by root, every time the
// epoch: an OCI archive, the same bytes for the same layout.
func tarDirectory(dir, path string, epoch time.Time) error {
	var names []string
	err := filepath.WalkDir(dir, func(p string, entry os.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		names = append(names, p)
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(names)
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	defer out.Close()
	w := tar.NewWriter(out)
	for _, p := range names {
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		info, err := os.Lstat(p)
		if err != nil {
			return err
		}
		header := &tar.Header{Name: filepath.ToSlash(rel), ModTime: epoch, Format: tar.FormatPAX}
		switch {
		case info.IsDir():
			header.Typeflag, header.Mode, header.Name = tar.TypeDir, 0o755, header.Name+"/"
		case info.Mode().IsRegular():
			header.Typeflag, header.Mode, header.Size = tar.TypeReg, 0o644, info.Size()
		default:
			return fmt.Errorf("%s is neither a directory nor a file", p)
		}
		if err := w.WriteHeader(header); err != nil {
			return err
		}
		if header.Typeflag == tar.TypeReg {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if _, err := w.Write(data); err != nil {
				return err
			}
		}
	}
	if err := w.Close(); err != nil {
		return err
	}
	return out.Close()
}

func rootfsCommand(args []string) error {
	flags := flag.NewFlagSet("rootfs", flag.ContinueOnError)
	out := flags.String("out", "", "the directory to write the files into")
	epoch := flags.Int64("epoch", 0, "every file's time, seconds since 1970")
	if err := flags.Parse(args); err != nil {
		return err
	}
	if *out == "" {
		return errors.New("-out is required")
	}
	entries, err := files()
	if err != nil {
		return err
	}
	layerBytes, err := layerTar(entries, time.Unix(*epoch, 0).UTC())
	if err != nil {
		return err
	}
	return untar(bytes.NewReader(layerBytes), *out)
}

// readImage reads an OCI layout directory (its one image) or a
// docker-archive.
func readImage(path string) (v1.Image, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !info.IsDir() {
		return tarball.ImageFromPath(path, nil)
	}
	index, err := layout.ImageIndexFromPath(path)
	if err != nil {
		return nil, err
	}
	manifest, err := index.IndexManifest()
	if err != nil {
		return nil, err
	}
	if len(manifest.Manifests) != 1 {
		return nil, fmt.Errorf("%s holds %d images, not one", path, len(manifest.Manifests))
	}
	return index.Image(manifest.Manifests[0].Digest)
}

func unpackCommand(args []string) error {
	flags := flag.NewFlagSet("unpack", flag.ContinueOnError)
	image := flags.String("image", "", "an OCI layout directory or a docker-archive")
	to := flags.String("to", "", "the directory to write the filesystem into")
	if err := flags.Parse(args); err != nil {
		return err
	}
	if *image == "" || *to == "" {
		return errors.New("-image and -to are required")
	}
	img, err := readImage(*image)
	if err != nil {
		return err
	}
	configFile, err := img.ConfigFile()
	if err != nil {
		return err
	}
	filesystem := mutate.Extract(img)
	defer filesystem.Close()
	if err := untar(filesystem, *to); err != nil {
		return err
	}
	config := configFile.Config
	return json.NewEncoder(os.Stdout).Encode(map[string]any{
		"user":       config.User,
		"entrypoint": config.Entrypoint,
		"env":        config.Env,
		"workingDir": config.WorkingDir,
		"labels":     config.Labels,
	})
}

// untar writes a tar's directories and regular files under dir, with their
// modes, numeric owners and times; anything else, or a name leaving dir, is
// an error.
func untar(r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	for {
		header, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		clean := filepath.Clean("/" + header.Name)
		target := filepath.Join(dir, clean)
		mode := os.FileMode(header.Mode & 0o777)
		if header.Mode&0o1000 != 0 {
			mode |= os.ModeSticky
		}
		switch header.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return err
			}
			out, err := os.OpenFile(target, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
			if err != nil {
				return err
			}
			if _, err := io.Copy(out, tr); err != nil {
				out.Close()
				return err
			}
			if err := out.Close(); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%s: entry type %q is not expected in this image", header.Name, header.Typeflag)
		}
		if err := os.Chmod(target, mode); err != nil {
			return err
		}
		// Owners as the image says: only root can give files away.
		if os.Geteuid() == 0 {
			if err := os.Lchown(target, header.Uid, header.Gid); err != nil {
				return err
			}
		}
		if err := os.Chtimes(target, header.ModTime, header.ModTime); err != nil {
			return err
		}
	}
}

func listCommand(args []string) error {
	flags := flag.NewFlagSet("list", flag.ContinueOnError)
	image := flags.String("image", "", "an OCI layout directory or a docker-archive")
	if err := flags.Parse(args); err != nil {
		return err
	}
	if *image == "" {
		return errors.New("-image is required")
	}
	img, err := readImage(*image)
	if err != nil {
		return err
	}
	filesystem := mutate.Extract(img)
	defer filesystem.Close()
	var lines []string
	tr := tar.NewReader(filesystem)
	for {
		header, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		sum := sha256.New()
		size, err := io.Copy(sum, tr)
		if err != nil {
			return err
		}
		digest := "-"
		if header.Typeflag == tar.TypeReg {
			digest = fmt.Sprintf("%x", sum.Sum(nil))
		}
		name := strings.TrimSuffix(strings.TrimPrefix(filepath.Clean("/"+header.Name), "/"), "/")
		lines = append(lines, fmt.Sprintf("%c %04o %d:%d %d %s /%s",
			header.Typeflag, header.Mode&0o7777, header.Uid, header.Gid, size, digest, name))
	}
	sort.Slice(lines, func(i, j int) bool {
		return lines[i][strings.LastIndex(lines[i], " ")+1:] < lines[j][strings.LastIndex(lines[j], " ")+1:]
	})
	for _, line := range lines {
		fmt.Println(line)
	}
	return nil
}
