//! The container hash of every kubelet epoch, and the text behind it.
//!
//! ```text
//! 1.8  – 1.15  FNV-1a( spew %#v of the v1.Container struct )
//! 1.16 – 1.30  FNV-1a( spew %#v of []byte(json.Marshal(container)) )
//! 1.27 – 1.30  hashWithoutResources: the same with Resources zeroed
//! 1.31 +       FNV-1a( spew %#v of []byte(json.Marshal({"name":…,"image":…})) )
//! ```
//!
//! A container's one text streams straight into the hasher; several texts, of one container or
//! of a [`HashBatch`] of them, are written into buffers and hashed in FNV lanes. A container
//! is decoded once per distinct type graph among the requested versions (a field whose type
//! has the same shape in several graphs once for all of them), and each distinct (graph, epoch)
//! is hashed once. A graph that differs from the last one only in root fields the container
//! does not have takes its decode and texts ([`crate::kubelet::alike`]). One struct-dump
//! version alone is written straight from the JSON ([`crate::kubelet::spew_direct`]), and
//! decoded only to name the error of a container it refuses.
//!
//! ```
//! use kubehash::kubelet::{hash::hash_container, version::parse_version_set};
//! // The values kubelet's own unit test asserts.
//! let c = serde_json::json!({"name":"test_container","image":"foo/image:v1",
//!     "args":["/bin/sh","-c","echo abc"],"ports":[{"containerPort":8001}]});
//! let h = hash_container(&c, &parse_version_set("1.16,1.31").unwrap(), "").unwrap();
//! assert_eq!(h.hash_hex(), vec![("1.16".into(), "3c42280f".into()), ("1.31".into(), "8e45cbd0".into())]);
//! ```

use std::ops::Range;

use crate::error::Result;
use crate::kubelet::alike::{alike, root_keys};
use crate::kubelet::decode::{
    decode_container, decode_container_sharing, decode_container_taking, Arena, SharedDecodes, Val,
};
use crate::kubelet::gojson;
use crate::kubelet::json::Json;
use crate::kubelet::lanes::fnv1a_sharing;
use crate::kubelet::schema::Schema;
use crate::kubelet::sink::{format_hash, Fnv32a, Remembering, SharedTexts, Sink};
use crate::kubelet::spew::{self, ByteSlice};
use crate::kubelet::spew_direct;
use crate::kubelet::version::{HashEpoch, KubeletVersion};

/// The arena's first chunk: enough for the decodes of all 29 versions of each of the golden
/// containers (their values and the decoder's field slots), so that a container takes one
/// allocation for all of them.
const ARENA_START: usize = 24 << 10;

/// Which of the kubelet's two annotations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Annotation {
    /// `io.kubernetes.container.hash`
    Hash,
    /// `io.kubernetes.container.hashWithoutResources` (1.27 – 1.30 only)
    HashWithoutResources,
}

/// The hashes of one container for a set of versions, oldest version first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerHashes {
    pub hash: Vec<(KubeletVersion, u32)>,
    /// Only for requested versions in 1.27 – 1.30.
    pub hash_without_resources: Vec<(KubeletVersion, u32)>,
}

impl ContainerHashes {
    /// The hash for `v`, if it was computed.
    pub fn get(&self, v: KubeletVersion) -> Option<u32> {
        self.hash.iter().find(|(k, _)| *k == v).map(|(_, h)| *h)
    }

    /// The hashWithoutResources for `v`, if it was computed.
    pub fn get_without_resources(&self, v: KubeletVersion) -> Option<u32> {
        self.hash_without_resources
            .iter()
            .find(|(k, _)| *k == v)
            .map(|(_, h)| *h)
    }

    /// `(version, hex)` pairs, as stored in the annotation.
    pub fn hash_hex(&self) -> Vec<(String, String)> {
        hex(&self.hash)
    }

    pub fn without_resources_hex(&self) -> Vec<(String, String)> {
        hex(&self.hash_without_resources)
    }
}

fn hex(v: &[(KubeletVersion, u32)]) -> Vec<(String, String)> {
    v.iter()
        .map(|(k, h)| (k.to_string(), format_hash(*h)))
        .collect()
}

/// Computes the kubelet hashes of one container JSON object for `versions` (sorted, distinct).
/// `path` prefixes error messages (e.g. `default/web/containers[0]`).
///
/// Each distinct type graph is decoded once and each distinct text rendered once. With several
/// texts, they are rendered into buffers first: JSON-epoch texts are the spew dump of a JSON
/// document, so versions whose documents are equal share one text; the distinct texts are then
/// hashed side by side in FNV lanes, a prefix texts share once
/// ([`crate::kubelet::lanes::fnv1a_sharing`]). [`HashBatch`] does the same for many containers
/// at once, all their texts in the same lanes.
pub fn hash_container<'a>(
    json: impl Json<'a>,
    versions: &[KubeletVersion],
    path: &str,
) -> Result<ContainerHashes> {
    // The decoded values live in one arena, freed with it when the hashes are known.
    let arena = Arena::with_capacity(ARENA_START);
    if let Some((v, schema)) = one_struct_dump(versions)? {
        let mut hasher = Fnv32a::new();
        if spew_direct::write_container(schema, json, &arena, &mut hasher).is_some() {
            return Ok(hashes_of(&[(v, Annotation::Hash, 0)], |_| hasher.finish()));
        }
    }
    Ok(Plan::make(json, versions, path, &arena)?.hash_now())
}

/// The version and schema when `versions` is one struct-dump (≤ 1.15) version: its one text is
/// written straight from the JSON ([`spew_direct`]), and the decoder runs only to name what
/// that refuses.
fn one_struct_dump(
    versions: &[KubeletVersion],
) -> Result<Option<(KubeletVersion, &'static Schema)>> {
    match versions {
        &[v] if v.epoch() == HashEpoch::Spew => Ok(Some((v, Schema::for_version(v)?))),
        _ => Ok(None),
    }
}

/// The hashes of many containers, computed together: each container's texts are rendered into
/// buffers when it is added, and [`HashBatch::finish`] hashes the texts of all of them side by
/// side in FNV lanes. A single text is a serial chain that runs at the multiply's latency;
/// several containers' texts in lanes overlap their multiplies. The hashes are those
/// [`hash_container`] gives.
///
/// The texts waiting in the buffers are hashed as soon as they come to [`TEXT_LIMIT`] bytes, so
/// a batch of large pods holds no more than that, whatever `finish` is called after.
pub struct HashBatch {
    buffers: Buffers,
    arena: Arena,
    /// The texts rendered and not yet hashed (the first ones of `buffers.text`), and their bytes.
    distinct: usize,
    text_bytes: usize,
    /// How many bytes of texts may wait.
    text_limit: usize,
    /// Per container added, its hashes once known (until then, the default).
    added: Vec<ContainerHashes>,
    /// Per container whose texts wait: its index in `added`, and per requested (version,
    /// annotation) the index of its text among the waiting texts.
    waiting: Vec<(usize, Wanted)>,
}

/// Per requested (version, annotation), the index of its text.
type Wanted = Vec<(KubeletVersion, Annotation, usize)>;

/// The most bytes of texts a [`HashBatch`] holds before it hashes them: a few dozen containers'
/// texts, enough to keep the lanes full. Its buffers keep their capacity, so this bounds a
/// worker's memory too: with 1 MiB, `hash` of large pods held 15 MB more than with this, and
/// was at most 2 % (1.15) and 1 % (1.30) faster.
pub const TEXT_LIMIT: usize = 1 << 18;

impl Default for HashBatch {
    fn default() -> Self {
        HashBatch {
            buffers: Buffers::default(),
            arena: Arena::default(),
            distinct: 0,
            text_bytes: 0,
            text_limit: TEXT_LIMIT,
            added: Vec::new(),
            waiting: Vec::new(),
        }
    }
}

impl HashBatch {
    /// Decodes `json` and renders its texts for `versions` (sorted, distinct); its hashes will
    /// be at the index returned in what [`HashBatch::finish`] returns. On an error, nothing is
    /// added.
    pub fn add<'a>(
        &mut self,
        json: impl Json<'a>,
        versions: &[KubeletVersion],
        path: &str,
    ) -> Result<usize> {
        self.arena.reset();
        let k = self.added.len();
        if let Some((v, schema)) = one_struct_dump(versions)? {
            if self.buffers.text.len() <= self.distinct {
                self.buffers.text.resize_with(self.distinct + 1, Vec::new);
            }
            let text = &mut self.buffers.text[self.distinct];
            text.clear();
            if spew_direct::write_container(schema, json, &self.arena, text).is_some() {
                self.wait(
                    self.distinct + 1,
                    vec![(v, Annotation::Hash, self.distinct)],
                );
                return Ok(k);
            }
        }
        let plan = Plan::make(json, versions, path, &self.arena)?;
        match plan.texts.as_slice() {
            // A name+image text is too short to gain from lanes what a buffer costs.
            [] | [(HashEpoch::NameImage, ..)] => self.added.push(plan.hash_now()),
            texts => {
                let (same, end) =
                    render_texts(texts, &plan.decoded, &mut self.buffers, self.distinct);
                let wanted = plan.wanted.iter().map(|&(v, a, t)| (v, a, same[t]));
                self.wait(end, wanted.collect());
            }
        }
        Ok(k)
    }

    /// Adds a container whose texts were just rendered into `buffers.text[distinct..end]`: its
    /// hashes wait for them (`wanted`: per requested version and annotation, its text), and the
    /// waiting texts are hashed once they pass the limit.
    fn wait(&mut self, end: usize, wanted: Wanted) {
        self.text_bytes += self.buffers.text[self.distinct..end]
            .iter()
            .map(Vec::len)
            .sum::<usize>();
        self.distinct = end;
        self.waiting.push((self.added.len(), wanted));
        self.added.push(ContainerHashes::default());
        if self.text_bytes >= self.text_limit {
            self.hash_waiting();
        }
    }

    /// Adds a container whose hashes are known already; they will be at the index returned.
    pub fn add_hashes(&mut self, hashes: ContainerHashes) -> usize {
        self.added.push(hashes);
        self.added.len() - 1
    }

    /// The hashes of the containers added since the last call, in the order they were added.
    pub fn finish(&mut self) -> Vec<ContainerHashes> {
        self.hash_waiting();
        std::mem::take(&mut self.added)
    }

    /// Hashes the waiting texts in lanes and fills in their containers' hashes.
    fn hash_waiting(&mut self) {
        let hashes = hash_in_lanes(&self.buffers.text[..self.distinct]);
        for (k, wanted) in self.waiting.drain(..) {
            self.added[k] = hashes_of(&wanted, |t| hashes[t]);
        }
        self.distinct = 0;
        self.text_bytes = 0;
    }
}

/// A container's hashes: per requested (version, annotation), the hash of its text.
fn hashes_of(
    wanted: &[(KubeletVersion, Annotation, usize)],
    hash: impl Fn(usize) -> u32,
) -> ContainerHashes {
    let mut out = ContainerHashes {
        hash: Vec::with_capacity(wanted.len()),
        hash_without_resources: Vec::new(),
    };
    for &(v, a, t) in wanted {
        match a {
            Annotation::Hash => out.hash.push((v, hash(t))),
            Annotation::HashWithoutResources => out.hash_without_resources.push((v, hash(t))),
        }
    }
    out
}

/// A container decoded for a set of versions, and the distinct texts to hash for it.
struct Plan<'v> {
    /// The decoded values: (the schema decoded under, value).
    decoded: Vec<(&'static Schema, Val<'v>)>,
    /// The distinct texts: (epoch, type graph, annotation, index into `decoded`).
    texts: Vec<(HashEpoch, KubeletVersion, Annotation, usize)>,
    /// Per requested (version, annotation), its text.
    wanted: Wanted,
}

impl<'v> Plan<'v> {
    fn make<'a: 'v>(
        json: impl Json<'a>,
        versions: &[KubeletVersion],
        path: &str,
        arena: &'v Arena,
    ) -> Result<Plan<'v>> {
        // Fields whose types have the same shape in several graphs are decoded once.
        let mut shared = (versions.len() > 1).then(SharedDecodes::default);
        // The decoded values: (the schema decoded under, value).
        // (Sized for every version up front: growing them was a tenth of a container's allocations.)
        let mut decoded: Vec<(&'static Schema, Val)> = Vec::with_capacity(versions.len());
        // The distinct texts: (epoch, type graph, annotation, index into `decoded`).
        let mut texts: Vec<(HashEpoch, KubeletVersion, Annotation, usize)> =
            Vec::with_capacity(2 * versions.len());
        // Per requested (version, annotation), its text.
        let mut wanted: Wanted = Vec::with_capacity(2 * versions.len());
        // Per type graph met: (its oldest version, index into `decoded`, the graph whose texts
        // it writes); and the last one met, with its schema.
        let mut graphs: Vec<(KubeletVersion, usize, KubeletVersion)> =
            Vec::with_capacity(versions.len());
        let mut last: Option<(&'static Schema, usize, KubeletVersion)> = None;
        // The container's root keys, as `alike` masks them (read once, when first needed).
        let mut root_key_set = None;
        for &v in versions {
            let schema = Schema::for_version(v)?;
            let group = schema.same_as();
            let (d, text_group) = match graphs.iter().find(|(g, _, _)| *g == group) {
                Some(&(_, d, t)) => (d, t),
                None => {
                    // A graph that decodes and writes this container as the last one did takes
                    // its decode (and, in the same epoch, its texts): see `alike`.
                    let taken = last.and_then(|(prev, d, t)| {
                        let same = alike(prev, schema)?;
                        if *root_key_set.get_or_insert_with(|| root_keys(json)) & same.mask != 0 {
                            return None;
                        }
                        match v.epoch() {
                            HashEpoch::NameImage => Some((d, group)),
                            _ => same.texts.then_some((d, t)),
                        }
                    });
                    let (d, t) = match taken {
                        Some(both) => both,
                        None => {
                            // The root fields alike the last decode's are taken from it.
                            let base = last.and_then(|(_, d, _)| match &decoded[d] {
                                (s, Val::Struct(fields)) => Some((alike(s, schema)?, fields)),
                                _ => None,
                            });
                            let val = match (shared.as_mut(), base) {
                                (Some(shared), Some((same, fields))) => decode_container_taking(
                                    schema, json, path, shared, fields, &same.take, arena,
                                )?,
                                (Some(shared), None) => {
                                    decode_container_sharing(schema, json, path, shared, arena)?
                                }
                                (None, _) => decode_container(schema, json, path, arena)?,
                            };
                            decoded.push((schema, val));
                            (decoded.len() - 1, group)
                        }
                    };
                    graphs.push((group, d, t));
                    (d, t)
                }
            };
            last = Some((schema, d, text_group));
            // Name+image hashes do not depend on the type graph.
            let key_group = match v.epoch() {
                HashEpoch::NameImage => KubeletVersion::from_minor(31)?,
                _ => text_group,
            };
            let mut annotations = [Some(Annotation::Hash), None];
            if v.has_hash_without_resources() {
                annotations[1] = Some(Annotation::HashWithoutResources);
            }
            for a in annotations.into_iter().flatten() {
                let t = match texts
                    .iter()
                    .position(|&(e, g, an, _)| e == v.epoch() && g == key_group && an == a)
                {
                    Some(t) => t,
                    None => {
                        texts.push((v.epoch(), key_group, a, d));
                        texts.len() - 1
                    }
                };
                wanted.push((v, a, t));
            }
        }
        Ok(Plan {
            decoded,
            texts,
            wanted,
        })
    }

    /// The hashes, each distinct text hashed here: one streamed into the hasher, several
    /// rendered into this thread's buffers and hashed in lanes.
    fn hash_now(&self) -> ContainerHashes {
        let hashes: Vec<u32> = match self.texts.as_slice() {
            [] => Vec::new(),
            &[(HashEpoch::NameImage, _, _, d)] => {
                let (schema, val) = &self.decoded[d];
                let (name, image) = name_image(schema, val);
                vec![name_image_hash(name, image)]
            }
            &[(epoch, _, a, d)] => {
                let (schema, val) = &self.decoded[d];
                let mut hasher = Fnv32a::new();
                write_hashed_text(schema, val, epoch, a, &mut hasher);
                vec![hasher.finish()]
            }
            many => BUFFERS.with(|b| {
                let mut b = b.borrow_mut();
                let (same, end) = render_texts(many, &self.decoded, &mut b, 0);
                let hashes = hash_in_lanes(&b.text[..end]);
                same.into_iter().map(|t| hashes[t]).collect()
            }),
        };
        hashes_of(&self.wanted, |t| hashes[t])
    }
}

/// Reused render buffers, per thread.
#[derive(Default)]
struct Buffers {
    /// Per text: the JSON document (JSON epochs) it dumps.
    json: Vec<Vec<u8>>,
    /// Per `hash` JSON document: where its root `resources` value is.
    resources_at: Vec<Option<Range<usize>>>,
    /// Per distinct text: its bytes.
    text: Vec<Vec<u8>>,
    /// The JSON and the struct-dump texts of values shared by several type graphs.
    json_shared: SharedTexts,
    spew_shared: SharedTexts,
}

thread_local! {
    static BUFFERS: std::cell::RefCell<Buffers> = std::cell::RefCell::default();
}

/// Renders every text of one container into `b.text` from `base` on, once per distinct text,
/// and returns, per text, the index of its distinct text in `b.text`, and the index after the
/// last one written.
fn render_texts(
    texts: &[(HashEpoch, KubeletVersion, Annotation, usize)],
    decoded: &[(&'static Schema, Val)],
    b: &mut Buffers,
    base: usize,
) -> (Vec<usize>, usize) {
    let n = texts.len();
    // The buffers only grow: one dropped for a container with fewer texts would be allocated
    // again for the next.
    if b.json.len() < n {
        b.json.resize_with(n, Vec::new);
    }
    if b.text.len() < base + n {
        b.text.resize_with(base + n, Vec::new);
    }
    b.resources_at.clear();
    b.resources_at.resize(n, None);
    // Shared texts are keyed by the addresses of this container's values.
    b.json_shared.clear();
    b.spew_shared.clear();
    // Per text, the distinct text it is (an index into `b.text`).
    let mut same: Vec<usize> = Vec::with_capacity(n);
    let mut distinct = base;
    for (i, &(epoch, _, a, d)) in texts.iter().enumerate() {
        let (schema, val) = &decoded[d];
        let json = match epoch {
            HashEpoch::Spew => None,
            HashEpoch::Json => {
                let (before, rest) = b.json.split_at_mut(i);
                let buf = &mut rest[0];
                buf.clear();
                // The hashWithoutResources document is the hash document of the same value
                // with the resources value zeroed (gojson::write_container_marking).
                let whole = (0..i)
                    .filter(|&j| a == Annotation::HashWithoutResources && texts[j].3 == d)
                    .filter(|&j| (texts[j].0, texts[j].2) == (HashEpoch::Json, Annotation::Hash))
                    .find_map(|j| Some((j, b.resources_at[j].clone()?)));
                match whole {
                    Some((j, r)) => {
                        let doc = &before[j];
                        buf.extend_from_slice(&doc[..r.start]);
                        gojson::write_zero_resources(schema, buf);
                        buf.extend_from_slice(&doc[r.end..]);
                    }
                    None => {
                        let mut out = Remembering {
                            out: buf,
                            texts: &mut b.json_shared,
                        };
                        if a == Annotation::Hash {
                            b.resources_at[i] =
                                gojson::write_container_marking(schema, val, &mut out);
                        } else {
                            gojson::write_container(schema, val, true, &mut out);
                        }
                    }
                }
                Some(i)
            }
            HashEpoch::NameImage => {
                let buf = &mut b.json[i];
                buf.clear();
                let (name, image) = name_image(schema, val);
                gojson::write_name_image(name, image, buf);
                Some(i)
            }
        };
        // A JSON-epoch text is the dump of its document: equal documents, equal texts.
        if let Some(i) = json {
            let earlier = (0..i).find(|&j| texts[j].0 != HashEpoch::Spew && b.json[j] == b.json[i]);
            if let Some(j) = earlier {
                same.push(same[j]);
                continue;
            }
        }
        let text = &mut b.text[distinct];
        text.clear();
        match json {
            // One decode shares nothing: nothing to remember.
            None if decoded.len() == 1 => spew::write_container(schema, val, text),
            None => spew::write_container(
                schema,
                val,
                &mut Remembering {
                    out: text,
                    texts: &mut b.spew_shared,
                },
            ),
            Some(i) => spew::byte_slice_into(&b.json[i], text),
        }
        // Type graphs that differ only where this container has nothing (or only in JSON tags)
        // dump the same struct text: equal texts, one hash.
        if json.is_none() {
            let (earlier, this) = b.text.split_at(distinct);
            if let Some(k) = earlier[base..].iter().position(|t| *t == this[0]) {
                same.push(base + k);
                continue;
            }
        }
        same.push(distinct);
        distinct += 1;
    }
    (same, distinct)
}

/// FNV-1a of each text, in lanes, a prefix texts share hashed once.
fn hash_in_lanes(texts: &[Vec<u8>]) -> Vec<u32> {
    let refs: Vec<&[u8]> = texts.iter().map(Vec::as_slice).collect();
    let mut hashes = vec![0u32; texts.len()];
    fnv1a_sharing(&refs, &mut hashes);
    hashes
}

/// The exact bytes kubelet `v` feeds to FNV-1a for this container (`--explain`).
pub fn hashed_text<'a>(
    json: impl Json<'a>,
    v: KubeletVersion,
    a: Annotation,
    path: &str,
) -> Result<Vec<u8>> {
    let schema = Schema::for_version(v)?;
    let arena = Arena::new();
    let val = decode_container(schema, json, path, &arena)?;
    let mut text = Vec::new();
    write_hashed_text(schema, &val, v.epoch(), a, &mut text);
    Ok(text)
}

/// The JSON a JSON-epoch kubelet marshals before spew-printing it, for people reading `--explain`.
pub fn marshalled_json<'a>(
    json: impl Json<'a>,
    v: KubeletVersion,
    a: Annotation,
    path: &str,
) -> Result<Option<String>> {
    let schema = Schema::for_version(v)?;
    let arena = Arena::new();
    let val = decode_container(schema, json, path, &arena)?;
    let mut text = Vec::new();
    match v.epoch() {
        HashEpoch::Spew => return Ok(None),
        HashEpoch::Json => gojson::write_container(
            schema,
            &val,
            a == Annotation::HashWithoutResources,
            &mut text,
        ),
        HashEpoch::NameImage => {
            let (name, image) = name_image(schema, &val);
            gojson::write_name_image(name, image, &mut text)
        }
    }
    Ok(Some(String::from_utf8_lossy(&text).into_owned()))
}

/// Streams the hashed text of a decoded container into `out`.
pub fn write_hashed_text<S: Sink>(
    schema: &Schema,
    val: &Val,
    epoch: HashEpoch,
    a: Annotation,
    out: &mut S,
) {
    match epoch {
        HashEpoch::Spew => spew::write_container(schema, val, out),
        HashEpoch::Json => {
            let mut bytes = ByteSlice::open(out);
            gojson::write_container(
                schema,
                val,
                a == Annotation::HashWithoutResources,
                &mut bytes,
            );
            bytes.close();
        }
        HashEpoch::NameImage => {
            let (name, image) = name_image(schema, val);
            write_name_image_text(name, image, out);
        }
    }
}

/// The hashed text of kubelets 1.31 +: the dump of `{"image":…,"name":…}`.
fn write_name_image_text<S: Sink>(name: &str, image: &str, out: &mut S) {
    let mut bytes = ByteSlice::open(out);
    gojson::write_name_image(name, image, &mut bytes);
    bytes.close();
}

/// How every name+image text begins: `([]uint8)[` and the dump of
/// [`gojson::NAME_IMAGE_OPEN`] (a test holds the two equal).
const NAME_IMAGE_TEXT_OPEN: &[u8] = b"([]uint8)[123 34 105 109 97 103 101 34 58 34";

/// The hash of the name+image text ([`write_name_image_text`]). FNV-1a reads front to back,
/// so the text's fixed start is hashed once, at compile time: it is a third of the bytes of a
/// short name and image.
fn name_image_hash(name: &str, image: &str) -> u32 {
    const AFTER_OPEN: Fnv32a = Fnv32a::after(NAME_IMAGE_TEXT_OPEN);
    let mut hasher = AFTER_OPEN;
    let mut bytes = ByteSlice::resume(&mut hasher);
    gojson::write_name_image_rest(name, image, &mut bytes);
    bytes.close();
    hasher.finish()
}

/// The hashes [`hash_container`] gives, for `versions` that all hash only the name and image
/// (see [`only_name_image`]), a container that decodes under each of them with this name and
/// image.
pub fn name_image_hashes(name: &str, image: &str, versions: &[KubeletVersion]) -> ContainerHashes {
    let h = name_image_hash(name, image);
    ContainerHashes {
        hash: versions.iter().map(|&v| (v, h)).collect(),
        hash_without_resources: Vec::new(),
    }
}

/// Whether every one of `versions` hashes only a container's name and image, and stores no
/// second hash.
pub fn only_name_image(versions: &[KubeletVersion]) -> bool {
    versions
        .iter()
        .all(|v| v.epoch() == HashEpoch::NameImage && !v.has_hash_without_resources())
}

fn name_image<'v>(schema: &Schema, val: &'v Val) -> (&'v str, &'v str) {
    let field = |name: &str| -> &'v str {
        match (schema.root_field(name), val.resolved()) {
            (Some(i), Val::Struct(fields)) => match fields.get(i).map(Val::resolved) {
                Some(Val::Str(s)) => s,
                _ => "",
            },
            _ => "",
        }
    };
    (field("Name"), field("Image"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubelet::version::parse_version_set;
    use serde_json::json;

    #[test]
    fn kubelet_unit_test_values() {
        // pkg/kubelet/container/helpers_test.go asserts these for the JSON and name+image epochs.
        let c = json!({"name":"test_container","image":"foo/image:v1",
            "args":["/bin/sh","-c","echo abc"],"ports":[{"containerPort":8001}]});
        let h = hash_container(&c, &parse_version_set("all").unwrap(), "").unwrap();
        for (v, hex) in h.hash_hex() {
            let minor: u8 = v[2..].parse().unwrap();
            match minor {
                16..=30 => assert_eq!(hex, "3c42280f", "{v}"),
                31.. => assert_eq!(hex, "8e45cbd0", "{v}"),
                _ => {}
            }
        }
        assert_eq!(h.hash_without_resources.len(), 4);
    }

    /// The golden containers, and some a kubelet refuses to decode.
    fn containers() -> Vec<serde_json::Value> {
        let mut all = crate::test_corpus::golden_containers().to_vec();
        all.push(json!({"name":"bad","image":"i","ports":[{"containerPort":"80"}]}));
        all.push(json!({"name":"big","image":"i","ports":[{"containerPort":1e3}]}));
        all.push(json!({"name":5}));
        all
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(200))]
        /// Containers hashed together in a batch, their texts in the same lanes, get exactly the
        /// hashes and errors each gets alone, whatever the mix of versions, sizes and errors
        /// (an error must not move another container's hashes), whether the texts wait for
        /// `finish` or are hashed on the way when they pass the batch's limit, and a batch is
        /// reused after `finish` with nothing left over from the last one.
        #[test]
        fn a_batch_hashes_as_each_container_alone(
            batches in proptest::collection::vec(
                proptest::collection::vec(proptest::prelude::any::<proptest::sample::Index>(), 0..40),
                1..4,
            ),
            spec in proptest::sample::select(vec!["1.15", "1.30", "1.31", "1.8,1.16", "1.27..1.31", "1.15,1.30,1.37", "all"]),
            text_limit in proptest::sample::select(vec![0, 1, 3000, 20_000, 200_000, TEXT_LIMIT]),
        ) {
            let all = containers();
            let versions = parse_version_set(spec).unwrap();
            // From hashing after every container to never before `finish`.
            let mut batch = HashBatch { text_limit, ..HashBatch::default() };
            for picks in batches {
                let picked: Vec<&serde_json::Value> = picks.iter().map(|i| &all[i.index(all.len())]).collect();
                let added: Vec<std::result::Result<usize, String>> = picked
                    .iter()
                    .map(|c| batch.add(*c, &versions, "p").map_err(|e| e.to_string()))
                    .collect();
                let mut hashes = batch.finish();
                for (c, added) in picked.iter().zip(added) {
                    let alone = hash_container(*c, &versions, "p").map_err(|e| e.to_string());
                    let together = added.map(|k| std::mem::take(&mut hashes[k]));
                    proptest::prop_assert_eq!(together, alone);
                }
            }
        }
    }

    #[test]
    fn a_name_image_hash_is_the_hash_of_its_whole_text() {
        let mut open = Vec::new();
        ByteSlice::open(&mut open).put(gojson::NAME_IMAGE_OPEN);
        assert_eq!(open, NAME_IMAGE_TEXT_OPEN);
        let v = parse_version_set("1.31").unwrap();
        for (name, image) in [
            ("", ""),
            ("a", ""),
            ("", "b"),
            ("web", "nginx:1"),
            ("é<\n", "\"\u{2028}"),
        ] {
            let mut text = Vec::new();
            write_name_image_text(name, image, &mut text);
            let whole = Fnv32a::hash(&text);
            assert_eq!(name_image_hashes(name, image, &v).hash, vec![(v[0], whole)]);
            let c = json!({"name": name, "image": image});
            assert_eq!(
                hash_container(&c, &v, "c").unwrap().hash,
                vec![(v[0], whole)]
            );
        }
    }

    #[test]
    fn explain_text_is_what_gets_hashed() {
        let c = json!({"name":"a","image":"b"});
        let v: KubeletVersion = "1.31".parse().unwrap();
        let text = hashed_text(&c, v, Annotation::Hash, "").unwrap();
        assert_eq!(
            String::from_utf8(text.clone()).unwrap(),
            "([]uint8)[123 34 105 109 97 103 101 34 58 34 98 34 44 34 110 97 109 101 34 58 34 97 34 125]"
        );
        let h = hash_container(&c, &[v], "").unwrap();
        assert_eq!(h.get(v), Some(Fnv32a::hash(&text)));
    }
}
