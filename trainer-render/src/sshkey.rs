//! The MPI SSH key pair, made as Trainer makes it: a fresh ECDSA P-521 key, the private half as
//! a SEC1 PEM (`EC PRIVATE KEY`), the public half as an OpenSSH authorized_keys line. Kept out
//! of `render`, which must stay deterministic: the agent makes a key once per TrainJob.

use base64ct::Encoding;
use p521::elliptic_curve::rand_core::OsRng;
use p521::elliptic_curve::sec1::ToEncodedPoint;
use p521::pkcs8::LineEnding;

use crate::SshKeyPair;

const ALGORITHM: &str = "ecdsa-sha2-nistp521";
const CURVE: &str = "nistp521";

#[derive(Debug, thiserror::Error)]
#[error("could not encode the MPI SSH key: {0}")]
pub struct KeyError(String);

pub fn generate() -> Result<SshKeyPair, KeyError> {
    let secret = p521::SecretKey::random(&mut OsRng);
    let private_pem = secret.to_sec1_pem(LineEnding::LF).map_err(|e| KeyError(e.to_string()))?.to_string();
    let point = secret.public_key().to_encoded_point(false);
    // RFC 5656 §3.1: string(algorithm) string(curve) string(Q), each with a u32 length.
    let mut blob = Vec::new();
    for part in [ALGORITHM.as_bytes(), CURVE.as_bytes(), point.as_bytes()] {
        blob.extend_from_slice(&(part.len() as u32).to_be_bytes());
        blob.extend_from_slice(part);
    }
    let public_openssh = format!("{ALGORITHM} {}", base64ct::Base64::encode_string(&blob));
    Ok(SshKeyPair { private_pem, public_openssh })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn makes_a_p521_pair_in_the_formats_trainer_writes() {
        let k = generate().expect("key");
        assert!(k.private_pem.starts_with("-----BEGIN EC PRIVATE KEY-----\n"));
        let (alg, b64) = k.public_openssh.split_once(' ').expect("two fields");
        assert_eq!(alg, ALGORITHM);
        let blob = base64ct::Base64::decode_vec(b64).expect("base64");
        // 4+19 algorithm, 4+8 curve, 4+133 uncompressed P-521 point.
        assert_eq!(blob.len(), 4 + 19 + 4 + 8 + 4 + 133);
        assert_ne!(generate().expect("key").private_pem, k.private_pem, "fresh each time");
    }
}
