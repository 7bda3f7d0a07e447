from symnet._src.datasets import MAX_SAMPLE_VALUES as MAX_SAMPLE_VALUES
from symnet._src.datasets import Dataset as Dataset
from symnet._src.datasets import HmmTask as HmmTask
from symnet._src.datasets import accuracy as accuracy
from symnet._src.datasets import phone_error_rate as phone_error_rate
