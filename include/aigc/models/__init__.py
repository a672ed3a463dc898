"""Pure ``nn.Module`` generators and their tokenizer: nothing here knows about distribution."""

from aigc.models.cvae import ConditionalVAE, VAELoss
from aigc.models.tokenizer import Vocab

__all__ = ["ConditionalVAE", "VAELoss", "Vocab"]
